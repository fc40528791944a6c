// The training step of an MLP on one host device, and the GEMMs that step performs, run
// through lockstep's own ops at exactly the step's shapes. GEMM time / step time is the share
// of the step spent in GEMM (the rest: elementwise kernels, loss, optimizer, upload, overhead).
// Arguments: batch, then the layer widths are 784-H-H-10 with H = the second argument.
#include <benchmark/benchmark.h>

#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include "ops/gemm.h"
#include <lockstep/data_parallel.h>

namespace {

const ls::Device kHost0{ls::DeviceKind::kHost, 0};

using ls::bench::mlp_widths;
using ls::bench::random_batch;

void BM_train_step(benchmark::State& state) {
  const int64_t batch_size = state.range(0);
  ls::DataParallel trainer({kHost0}, ls::mlp_factory(mlp_widths(state.range(1))),
                           ls::make_optimizer_factory({}));
  const ls::data::Batch batch = random_batch(batch_size, 784);
  trainer.step(batch);  // warm-up: fills the allocator's cache
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step(batch).loss);
  state.counters["samples_per_s"] =
      benchmark::Counter(static_cast<double>(batch_size) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_train_step)->Name("train_step/mlp/host:1")->Args({256, 1024})->Args({128, 256})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

// The 3 forward and 5 backward GEMMs of one step (no dx for the input layer).
void BM_step_gemms(benchmark::State& state) {
  const int64_t rows = state.range(0);
  const std::vector<int64_t> w = mlp_widths(state.range(1));
  auto stream = ls::device_runtime(kHost0).create_stream();
  std::vector<ls::Tensor> acts, weights;
  for (size_t i = 0; i < w.size(); ++i)
    acts.push_back(ls::Tensor::empty({rows, w[i]}, ls::DType::kF32, kHost0));
  for (size_t i = 0; i + 1 < w.size(); ++i)
    weights.push_back(ls::Tensor::empty({w[i + 1], w[i]}, ls::DType::kF32, kHost0));
  std::vector<ls::Tensor> grads_w = weights, grads_a = acts;
  for (auto& t : grads_w) t = ls::Tensor::empty(t.shape(), ls::DType::kF32, kHost0);
  for (auto& t : grads_a) t = ls::Tensor::empty(t.shape(), ls::DType::kF32, kHost0);
  double flops = 0;
  for (size_t i = 0; i + 1 < w.size(); ++i)
    flops += 2.0 * rows * w[i] * w[i + 1] * (i == 0 ? 2 : 3);
  for (auto _ : state) {
    for (size_t i = 0; i + 1 < w.size(); ++i)
      ls::matmul(acts[i], false, weights[i], true, acts[i + 1], 1, 0, *stream);
    for (size_t i = w.size() - 1; i-- > 0;) {
      ls::matmul(grads_a[i + 1], true, acts[i], false, grads_w[i], 1, 1, *stream);
      if (i > 0) ls::matmul(grads_a[i + 1], false, weights[i], false, grads_a[i], 1, 0, *stream);
    }
    stream->synchronize();
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(flops * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_step_gemms)->Name("step_gemms/mlp/host:1")->Args({256, 1024})->Args({128, 256})
    ->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
