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
//   attention/layer/<device>/<precision>/T:<t>/unfused     one layer's causal attention, forward
//   attention/layer/<device>/<precision>/T:<t>/fused:<b>   and backward, from head-major q, k, v
//                                      to dq, dk, dv: the unfused ops nn::attention runs without
//                                      fused kernels (the six products in causal_block_rows
//                                      blocks, the softmax and its backward over [B*H, T, T], the
//                                      bf16 casts of P and dS), or fused_attention with query
//                                      blocks of b rows (0: its own choice); host only. Counter
//                                      GFLOPs as causal-products
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
  report_time_per_call(state, per_iteration);
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
  report_time_per_call(state, per_iteration);
}

// x as attention's products take it: cast to bf16 once in bf16, as nn::attention does.
Tensor as_operand(const Tensor& x, Precision precision, Stream& stream) {
  return precision == Precision::kBF16 ? cast_to_bf16(x, stream) : x;
}

// A [B*H, T, cols] operand of uniform values, as_operand.
Tensor random_operand(int64_t t, int64_t cols, Precision precision, Device device, Stream& stream) {
  const int64_t bh = kBatch * kHeads;
  const Tensor x = Tensor::from_host(uniform(bh * t * cols), {bh, t, cols}, device, stream);
  return as_operand(x, precision, stream);
}

// S = Q K^T, O = P V; backward dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q, on operands
// made by random_operand.
void run_causal_products(benchmark::State& state, Device device, Precision precision, int64_t t,
                         int64_t block, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const int64_t bh = kBatch * kHeads;
  const auto make = [&](int64_t cols) {
    return random_operand(t, cols, precision, device, *stream);
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
  report_time_per_call(state, per_iteration);
}

// One layer's causal attention forward and backward, fused (block_rows >= 0) or unfused (< 0).
void run_layer(benchmark::State& state, Precision precision, int64_t t, int64_t block_rows) {
  const Device device{DeviceKind::kHost, 0};
  auto stream = device_runtime(device).create_stream();
  const int64_t bh = kBatch * kHeads;
  const auto make = [&](int64_t cols) {
    return random_operand(t, cols, precision, device, *stream);
  };
  const Tensor q = make(kHeadDim), k = make(kHeadDim), v = make(kHeadDim), d_out = make(kHeadDim);
  const auto f32 = [&](int64_t cols) { return Tensor::empty({bh, t, cols}, DType::kF32, device); };
  const Tensor out = f32(kHeadDim), dq = f32(kHeadDim), dk = f32(kHeadDim), dv = f32(kHeadDim);
  const float scale = 0.125f;
  const int64_t block = causal_block_rows(t, precision, DeviceKind::kHost);
  const auto layer = [&] {
    if (block_rows >= 0) {
      fused_attention(q, k, v, Tensor(), kHeads, true, scale, out, *stream, block_rows);
      fused_attention_backward(q, k, v, d_out, Tensor(), kHeads, true, scale, dq, dk, dv, *stream,
                               block_rows);
      return;
    }
    const Tensor probs = f32(t), dprobs = f32(t);
    causal_scores(q, k, probs, block, *stream, precision);
    attention_softmax(probs, Tensor(), kHeads, true, scale, probs, *stream);
    const Tensor p = as_operand(probs, precision, *stream);
    causal_apply(p, false, v, out, block, *stream, precision);
    causal_apply(p, true, d_out, dv, block, *stream, precision);
    causal_scores(d_out, v, dprobs, block, *stream, precision);
    attention_softmax_backward(probs, dprobs, scale, dprobs, *stream, true);
    const Tensor ds = as_operand(dprobs, precision, *stream);
    causal_apply(ds, false, k, dq, block, *stream, precision);
    causal_apply(ds, true, q, dk, block, *stream, precision);
  };
  layer();  // warm-up (primitives, scratch)
  stream->synchronize();
  for (auto _ : state) {
    layer();
    stream->synchronize();
  }
  state.counters["GFLOPs"] = benchmark::Counter(
      6 * gemm_flops(t, t, kHeadDim) * bh * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// CUDA's fused attention as nn::attention runs it in a bf16 GPT-2 124M step (packed_attention:
// batch 16, 12 heads, T = 1024, head dim 64, causal), forward and backward: TFLOPs counts the
// model's six [T, T] x D products at half (causal), as MFU counts attention; the kernels do nine
// (Note [Fused attention on CUDA]). s_per_call is one forward and backward.
void run_packed_gpt2(benchmark::State& state, Device device) {
  constexpr int64_t kB = 16, kH = 12, kT = 1024, kD = 64, kC = kH * kD;
  auto stream = device_runtime(device).create_stream();
  const Tensor qkv = Tensor::from_host(uniform(kB * kT * 3 * kC), {kB * kT, 3 * kC}, device, *stream);
  const Tensor dout = Tensor::from_host(uniform(kB * kT * kC), {kB * kT, kC}, device, *stream);
  const Tensor y = Tensor::empty({kB * kT, kC}, DType::kF32, device);
  const Tensor dqkv = Tensor::empty({kB * kT, 3 * kC}, DType::kF32, device);
  const auto layer = [&] {
    packed_attention(qkv, Tensor(), kB, kH, true, 0.125f, y, *stream);
    packed_attention_backward(qkv, dout, Tensor(), kB, kH, true, 0.125f, dqkv, false, *stream);
  };
  layer();  // warm-up (scratch)
  stream->synchronize();
  for (auto _ : state) {
    layer();
    stream->synchronize();
  }
  state.counters["TFLOPs"] = benchmark::Counter(
      0.5 * 6 * gemm_flops(kT, kT, kD) * kB * kH * static_cast<double>(state.iterations()) / 1e12,
      benchmark::Counter::kIsRate);
  report_time_per_call(state, 1);
}

void register_attention(const BenchConfig& config) {
  if (config.gpu_count > 0) {
    const Device cuda0{DeviceKind::kCuda, 0};
    benchmark::RegisterBenchmark("attention/packed/cuda:0/gpt2-124M/bf16",
                                 [=](benchmark::State& st) { run_packed_gpt2(st, cuda0); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond);
  }
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
  // Fused against unfused: the measurements behind nn::attention's choice and the fused kernel's
  // query blocks.
  for (const int64_t t : {128, 256, 512, 1024}) {
    for (const Precision precision : {Precision::kF32, Precision::kBF16}) {
      const std::string name = "attention/layer/host:0/" + std::string(precision_name(precision)) +
                               "/T:" + std::to_string(t) + "/";
      std::vector<std::pair<std::string, int64_t>> variants{{"unfused", -1}, {"fused:0", 0}};
      for (const int64_t b : {16, 32, 64, 128}) {
        if (b < t) variants.push_back({"fused:" + std::to_string(b), b});
      }
      for (const auto& [variant, rows] : variants) {
        benchmark::RegisterBenchmark(
            (name + variant).c_str(),
            [=](benchmark::State& st) { run_layer(st, precision, t, rows); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

const bool kRegistered = add_registrar(register_attention);

}  // namespace
}  // namespace ls::bench
