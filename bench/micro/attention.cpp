// The two per-head kernels of causal self-attention at GPT-2-small-like shapes (12 heads of 64,
// batch 4, T = 128 and 512), each through the checked op on a stream, synchronized per batch:
//   attention/softmax/<device>/T:<t>   attention_softmax in place, causal; counter GBps = bytes
//                                      read + written (2 x 4 x B H T^2) / time
//   attention/qk/<device>/T:<t>        scores = Q K^T by matmul_batched; counter
//                                      GFLOPs = 2 B H T^2 D / time
// <device> is host:0 and, with a GPU, cuda:0 (20 calls per synchronize).
#include "ops/attention.h"

#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/gemm.h"

namespace ls::bench {
namespace {

constexpr int64_t kBatch = 4, kHeads = 12, kHeadDim = 64;

std::vector<float> uniform(int64_t count) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

void run_softmax(benchmark::State& state, Device device, int64_t t, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t bh = kBatch * kHeads;
  const Tensor scores = Tensor::from_host(uniform(bh * t * t), {bh, t, t}, device, *stream);
  const float scale = 0.125f;
  attention_softmax(scores, Tensor(), kHeads, true, scale, scores, *stream);  // warm-up
  stream->synchronize();
  for (auto _ : state) {
    for (int i = 0; i < per_iteration; ++i)
      attention_softmax(scores, Tensor(), kHeads, true, scale, scores, *stream);
    stream->synchronize();
  }
  const double bytes = 2.0 * 4.0 * static_cast<double>(bh * t * t);
  state.counters["GBps"] =
      benchmark::Counter(bytes * per_iteration * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void run_qk(benchmark::State& state, Device device, int64_t t, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t bh = kBatch * kHeads;
  const Tensor q =
      Tensor::from_host(uniform(bh * t * kHeadDim), {bh, t, kHeadDim}, device, *stream);
  const Tensor k =
      Tensor::from_host(uniform(bh * t * kHeadDim), {bh, t, kHeadDim}, device, *stream);
  const Tensor scores = Tensor::empty({bh, t, t}, DType::kF32, device);
  matmul_batched(q, false, k, true, scores, bh, 1.0f, 0.0f, *stream);  // warm-up (handles)
  stream->synchronize();
  for (auto _ : state) {
    for (int i = 0; i < per_iteration; ++i)
      matmul_batched(q, false, k, true, scores, bh, 1.0f, 0.0f, *stream);
    stream->synchronize();
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      gemm_flops(t, t, kHeadDim) * bh * per_iteration * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

void register_attention(const BenchConfig& config) {
  std::vector<std::pair<Device, int>> devices = {{Device{DeviceKind::kHost, 0}, 1}};
  if (config.gpu_count > 0) devices.push_back({Device{DeviceKind::kCuda, 0}, 20});
  for (auto [device, per_iteration] : devices) {
    for (const int64_t t : {128, 512}) {
      const std::string suffix = device.str() + "/T:" + std::to_string(t);
      benchmark::RegisterBenchmark(
          ("attention/softmax/" + suffix).c_str(),
          [=](benchmark::State& st) { run_softmax(st, device, t, per_iteration); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark(
          ("attention/qk/" + suffix).c_str(),
          [=](benchmark::State& st) { run_qk(st, device, t, per_iteration); })
          ->UseRealTime()
          ->Unit(benchmark::kMicrosecond);
    }
  }
}

const bool kRegistered = add_registrar(register_attention);

}  // namespace
}  // namespace ls::bench
