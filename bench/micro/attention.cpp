// The two per-head kernels of causal self-attention at GPT-2-small-like shapes (12 heads of 64,
// batch 4, T = 128 and 512), each through the checked op on a stream, synchronized per batch:
//   attention/softmax/<device>/T:<t>   attention_softmax in place, causal; counter GBps = bytes
//                                      read + written (2 x 4 x B H T^2) / time
//   attention/qk/<device>/T:<t>        scores = Q K^T by matmul_batched; counter
//                                      GFLOPs = 2 B H T^2 D / time
//   attention/causal-products/<device>/<precision>/T:<t>/block:<b>
//                                      the six products of causal attention's forward and
//                                      backward (ops/causal_gemm.h) in blocks of b rows; b = T is
//                                      the full products. Counter GFLOPs = the full products'
//                                      2 x 6 B H T^2 D / time, so skipped blocks show as speed
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
#include "ops/causal_gemm.h"
#include "ops/elementwise.h"
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

// S = Q K^T, O = P V; backward dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q. The operands are
// cast to bf16 once beforehand in bf16, as nn::attention does.
void run_causal_products(benchmark::State& state, Device device, Precision precision, int64_t t,
                         int64_t block, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t bh = kBatch * kHeads;
  const auto make = [&](int64_t cols) {
    const Tensor x = Tensor::from_host(uniform(bh * t * cols), {bh, t, cols}, device, *stream);
    return precision == Precision::kBF16 ? cast_to_bf16(x, *stream) : x;
  };
  const Tensor q = make(kHeadDim), k = make(kHeadDim), v = make(kHeadDim), d_out = make(kHeadDim);
  const Tensor p = make(t), ds = make(t);
  const Tensor scores = Tensor::empty({bh, t, t}, DType::kF32, device);
  const Tensor out = Tensor::empty({bh, t, kHeadDim}, DType::kF32, device);
  const auto six = [&] {
    causal_scores(q, k, scores, block, *stream, precision);
    causal_apply(p, false, v, out, block, *stream, precision);
    causal_scores(d_out, v, scores, block, *stream, precision);
    causal_apply(p, true, d_out, out, block, *stream, precision);
    causal_apply(ds, false, k, out, block, *stream, precision);
    causal_apply(ds, true, q, out, block, *stream, precision);
  };
  six();  // warm-up (handles, primitives)
  stream->synchronize();
  for (auto _ : state) {
    for (int i = 0; i < per_iteration; ++i) six();
    stream->synchronize();
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      6 * gemm_flops(t, t, kHeadDim) * bh * per_iteration * static_cast<double>(state.iterations()),
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
    // The full products (block = T) against blocks of 32, 64 and 128 rows: the measurements
    // behind causal_block_rows.
    for (const int64_t t : {128, 256, 512, 1024}) {
      for (const Precision precision : {Precision::kF32, Precision::kBF16}) {
        std::vector<int64_t> blocks;
        for (const int64_t b : {32, 64, 128}) {
          if (b < t) blocks.push_back(b);
        }
        blocks.push_back(t);
        for (const int64_t block : blocks) {
          benchmark::RegisterBenchmark(
              ("attention/causal-products/" + device.str() + "/" + precision_name(precision) +
               "/T:" + std::to_string(t) + "/block:" + std::to_string(block))
                  .c_str(),
              [=](benchmark::State& st) {
                run_causal_products(st, device, precision, t, block, per_iteration);
              })
              ->UseRealTime()
              ->Unit(benchmark::kMicrosecond);
        }
      }
    }
  }
}

const bool kRegistered = add_registrar(register_attention);

}  // namespace
}  // namespace ls::bench
