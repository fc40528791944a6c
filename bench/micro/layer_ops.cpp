// The transformer layer ops at the shapes of a GPT-2-small step (8 x 512 tokens, width 768,
// vocabulary 50257), through the checked ops on a host stream and, with a GPU, on cuda:0:
//   layernorm/<device>/fwd|bwd        [4096, 768]
//   embedding/<device>/fwd|bwd        4096 ids into a [50257, 768] table
//   gelu/<device>/fwd|bwd/rows:<r>    GELU (tanh form) of [r, 1024]: r = 1024 is the MLP of the
//                                     GPT 4 x 256 step (8 x 128 tokens), r = 64 fits in L2, so
//                                     the two tell compute from memory traffic
// Counter GBps = bytes each call must read and write / time (10^9), the minimum traffic: compare
// with ceiling/memcpy (host) in the same run.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/embedding.h"
#include "ops/activation.h"
#include "ops/layernorm.h"

namespace ls::bench {
namespace {

constexpr int64_t kTokens = 4096, kWidth = 768, kVocab = 50257;

std::vector<float> uniform(int64_t count) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

// Runs `call` `per_iteration` times per synchronize; GBps from `bytes` per call.
template <typename Call>
void timed(benchmark::State& state, Stream& stream, double bytes, int per_iteration, Call call) {
  call();  // warm-up
  stream.synchronize();
  for (auto _ : state) {
    for (int i = 0; i < per_iteration; ++i) call();
    stream.synchronize();
  }
  state.counters["GBps"] =
      benchmark::Counter(bytes * per_iteration * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  report_time_per_call(state, per_iteration);
}

void run_layernorm(benchmark::State& state, Device device, bool backward, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t n = kTokens * kWidth;
  const Tensor x = Tensor::from_host(uniform(n), {kTokens, kWidth}, device, *stream);
  const Tensor dy = Tensor::from_host(uniform(n), {kTokens, kWidth}, device, *stream);
  const Tensor gamma = Tensor::from_host(uniform(kWidth), {kWidth}, device, *stream);
  const Tensor beta = Tensor::from_host(uniform(kWidth), {kWidth}, device, *stream);
  const Tensor dgamma = Tensor::from_host(uniform(kWidth), {kWidth}, device, *stream);
  const Tensor dbeta = Tensor::from_host(uniform(kWidth), {kWidth}, device, *stream);
  const Tensor y = Tensor::empty({kTokens, kWidth}, DType::kF32, device);
  const Tensor mean = Tensor::empty({kTokens}, DType::kF32, device);
  const Tensor rstd = Tensor::empty({kTokens}, DType::kF32, device);
  layernorm(x, gamma, beta, 1e-5f, y, mean, rstd, *stream);
  const double matrix = static_cast<double>(n) * sizeof(float);
  if (!backward) {
    timed(state, *stream, 2 * matrix, per_iteration,
          [&] { layernorm(x, gamma, beta, 1e-5f, y, mean, rstd, *stream); });
  } else {
    timed(state, *stream, 3 * matrix, per_iteration, [&] {  // x, dy read; dx written
      layernorm_backward(x, gamma, mean, rstd, dy, y, false, dgamma, dbeta, *stream);
    });
  }
  state.SetLabel("[4096, 768]");
}

void run_embedding(benchmark::State& state, Device device, bool backward, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  std::mt19937 rng(3);
  std::vector<int32_t> ids(kTokens);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % kVocab);
  const Tensor tids = Tensor::from_host_i32(ids, {kTokens}, device, *stream);
  const Tensor table =
      Tensor::from_host(uniform(kVocab * kWidth), {kVocab, kWidth}, device, *stream);
  const Tensor rows =
      Tensor::from_host(uniform(kTokens * kWidth), {kTokens, kWidth}, device, *stream);
  const double matrix = static_cast<double>(kTokens * kWidth) * sizeof(float);
  if (!backward) {
    timed(state, *stream, 2 * matrix, per_iteration,
          [&] { embedding(table, tids, rows, *stream); });
  } else {
    timed(state, *stream, 3 * matrix, per_iteration,  // dy read; table rows read and written
          [&] { embedding_backward(rows, tids, table, *stream); });
  }
  state.SetLabel("4096 ids, [50257, 768]");
}

void run_gelu(benchmark::State& state, Device device, bool backward, int64_t rows,
              int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t n = rows * 1024;
  const Tensor x = Tensor::from_host(uniform(n), {rows, 1024}, device, *stream);
  const Tensor dy = Tensor::from_host(uniform(n), {rows, 1024}, device, *stream);
  const Tensor y = Tensor::empty({rows, 1024}, DType::kF32, device);
  const double matrix = static_cast<double>(n) * sizeof(float);
  if (!backward) {
    timed(state, *stream, 2 * matrix, per_iteration, [&] { gelu(x, y, *stream); });
  } else {
    timed(state, *stream, 3 * matrix, per_iteration,
          [&] { gelu_backward(x, dy, y, false, *stream); });
  }
}

void register_layer_ops(const BenchConfig& config) {
  std::vector<std::pair<Device, int>> devices = {{Device{DeviceKind::kHost, 0}, 1}};
  if (config.gpu_count > 0) devices.push_back({Device{DeviceKind::kCuda, 0}, 20});
  for (auto [device, per_iteration] : devices) {
    for (bool backward : {false, true}) {
      const std::string suffix = device.str() + (backward ? "/bwd" : "/fwd");
      benchmark::RegisterBenchmark(
          ("layernorm/" + suffix).c_str(),
          [=](benchmark::State& st) { run_layernorm(st, device, backward, per_iteration); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(
          ("embedding/" + suffix).c_str(),
          [=](benchmark::State& st) { run_embedding(st, device, backward, per_iteration); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      for (const int64_t rows : {64, 1024}) {
        benchmark::RegisterBenchmark(
            ("gelu/" + suffix + "/rows:" + std::to_string(rows)).c_str(),
            [=](benchmark::State& st) { run_gelu(st, device, backward, rows, per_iteration); })
            ->UseRealTime()
            ->Unit(benchmark::kMicrosecond);
      }
    }
  }
}

const bool kRegistered = add_registrar(register_layer_ops);

}  // namespace
}  // namespace ls::bench
