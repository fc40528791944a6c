// Every GEMM of one training step of the 784-1024-1024-10 MLP at batch 256 (3 forward, 3 weight
// gradients, 2 input gradients; the first layer needs no input gradient), each at its own shape:
//   gemm/host:0/<gemm>   through ls::matmul on a host stream (enqueue + synchronize per GEMM)
//   gemm/cblas/<gemm>    the same call straight to CBLAS on the benchmark thread
//   gemm/cuda:0/<gemm>   through ls::matmul on cuda:0 (cuBLAS), registered only with a GPU
//   gemm/gpt4x256-step/host:0/<precision>  every GEMM of one training step of the GPT of 4 layers,
//                        hidden 256, 4 heads, 8 x 128 tokens (projections, attention per head,
//                        tied head; forward, input and weight gradients) through ls::matmul, in
//                        f32 and bf16: set against ceiling/onednn-f32 (or ceiling/sgemm) and
//                        ceiling/bf16gemm. bf16 takes operands stored in bf16, as the step's
//                        products do (nn::linear and attention round each operand once, and that
//                        rounding is the step's, not the GEMMs')
// Counter GFLOPs = 2mnk / time. Compare with ceiling/sgemm (single-core CBLAS at 1024^3) in the
// same run: cblas vs the ceiling is the cost of the shape, host:0 vs cblas lockstep's overhead.
#include "ops/gemm.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <random>
#include <string>
#include <vector>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include "ops/elementwise.h"
#include "ops/host/onednn_matmul.h"
#include <lockstep/tensor.h>

namespace ls::bench {
namespace {

constexpr int64_t kBatch = 256;

// C[m, n] = op(A) op(B) + beta C, row-major; A is [k, m] when trans_a, B is [n, k] when trans_b.
struct GemmShape {
  std::string name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  float beta;  // weight gradients accumulate, as in the step
};

std::vector<GemmShape> model_gemms() {
  const std::vector<int64_t> w = mlp_widths(1024);
  std::vector<GemmShape> shapes;
  for (size_t i = 0; i + 1 < w.size(); ++i) {
    const std::string layer = "fc" + std::to_string(i + 1);
    shapes.push_back({layer + ".fwd", kBatch, w[i + 1], w[i], false, true, 0.0f});   // y = x W^T
  }
  for (size_t i = w.size() - 1; i-- > 0;) {
    const std::string layer = "fc" + std::to_string(i + 1);
    shapes.push_back({layer + ".dW", w[i + 1], w[i], kBatch, true, false, 1.0f});    // dW = dy^T x
    if (i > 0)
      shapes.push_back({layer + ".dx", kBatch, w[i], w[i + 1], false, false, 0.0f});  // dx = dy W
  }
  return shapes;
}

std::vector<float> uniform(int64_t count) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) x = dist(rng);
  return v;
}

std::string shape_label(const GemmShape& s) {
  return "m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         (s.trans_a ? " T" : " N") + (s.trans_b ? "T" : "N");
}

void set_gflops(benchmark::State& state, const GemmShape& s, int per_iteration) {
  state.counters["GFLOPs"] = benchmark::Counter(
      gemm_flops(s.m, s.n, s.k) * per_iteration * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(shape_label(s));
}

// ls::matmul on `device`; `per_iteration` GEMMs are enqueued before each synchronize.
void run_matmul(benchmark::State& state, const GemmShape& s, Device device, int per_iteration) {
  auto stream = device_runtime(device).create_stream();
  const Shape a_shape = s.trans_a ? Shape{s.k, s.m} : Shape{s.m, s.k};
  const Shape b_shape = s.trans_b ? Shape{s.n, s.k} : Shape{s.k, s.n};
  const Tensor a = Tensor::from_host(uniform(shape_numel(a_shape)), a_shape, device, *stream);
  const Tensor b = Tensor::from_host(uniform(shape_numel(b_shape)), b_shape, device, *stream);
  const Tensor c = Tensor::from_host(uniform(s.m * s.n), {s.m, s.n}, device, *stream);
  matmul(a, s.trans_a, b, s.trans_b, c, 1.0f, s.beta, *stream);  // warm-up (handles, workspaces)
  stream->synchronize();
  for (auto _ : state) {
    for (int i = 0; i < per_iteration; ++i)
      matmul(a, s.trans_a, b, s.trans_b, c, 1.0f, s.beta, *stream);
    stream->synchronize();
  }
  set_gflops(state, s, per_iteration);
}

void run_cblas(benchmark::State& state, const GemmShape& s) {
  const std::vector<float> a = uniform(s.m * s.k), b = uniform(s.k * s.n);
  std::vector<float> c = uniform(s.m * s.n);
  const auto lda = static_cast<int>(s.trans_a ? s.m : s.k);
  const auto ldb = static_cast<int>(s.trans_b ? s.k : s.n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans,
                s.trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(s.m), static_cast<int>(s.n),
                static_cast<int>(s.k), 1.0f, a.data(), lda, b.data(), ldb, s.beta, c.data(),
                static_cast<int>(s.n));
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  set_gflops(state, s, 1);
}

// The GEMMs of one step of the GPT 4x256 (batch 8, seq 128, 4 heads): `count` products of each.
struct StepGemm {
  GemmShape shape;
  int64_t batch;  // matrices per product (attention: batch x heads)
  int64_t count;  // products of this shape per step
};

std::vector<StepGemm> gpt_step_gemms() {
  const int64_t tokens = 8 * 128, hidden = 256, layers = 4, heads_x_batch = 4 * 8;
  const int64_t seq = 128, head_dim = hidden / 4, vocab = 258;
  std::vector<StepGemm> gemms;
  // A Linear of in -> out: y = x W^T, dx = dy W, dW += dy^T x; per layer and for the head.
  auto linear = [&](int64_t in, int64_t out, int64_t count) {
    gemms.push_back({{"fwd", tokens, out, in, false, true, 0.0f}, 1, count});
    gemms.push_back({{"dx", tokens, in, out, false, false, 0.0f}, 1, count});
    gemms.push_back({{"dW", out, in, tokens, true, false, 1.0f}, 1, count});
  };
  linear(hidden, 3 * hidden, layers);  // qkv
  linear(hidden, hidden, layers);      // attention output
  linear(hidden, 4 * hidden, layers);  // fc
  linear(4 * hidden, hidden, layers);  // proj
  linear(hidden, vocab, 1);            // tied head
  // Attention per head: S = Q K^T, O = P V; backward dP = dO V^T, dV = P^T dO, dQ = dS K,
  // dK = dS^T Q.
  for (const GemmShape& g : {GemmShape{"qk", seq, seq, head_dim, false, true, 0.0f},
                             GemmShape{"pv", seq, head_dim, seq, false, false, 0.0f},
                             GemmShape{"dp", seq, seq, head_dim, false, true, 0.0f},
                             GemmShape{"dv", seq, head_dim, seq, true, false, 0.0f},
                             GemmShape{"dq", seq, head_dim, seq, false, false, 0.0f},
                             GemmShape{"dk", seq, head_dim, seq, true, false, 0.0f}}) {
    gemms.push_back({g, heads_x_batch, layers});
  }
  return gemms;
}

void run_step_gemms(benchmark::State& state, Precision precision) {
  const Device host0{DeviceKind::kHost, 0};
  auto stream = device_runtime(host0).create_stream();
  struct Operands {
    Tensor a, b, c;  // a and b in bf16 for kBF16
  };
  const bool bf16 = precision == Precision::kBF16;
  const auto operand = [&](const Shape& shape) {
    Tensor t = Tensor::from_host(uniform(shape_numel(shape)), shape, host0, *stream);
    return bf16 ? cast_to_bf16(t, *stream) : t;
  };
  std::vector<Operands> operands;
  double flops = 0.0;
  for (const StepGemm& g : gpt_step_gemms()) {
    const GemmShape& s = g.shape;
    const Shape a_shape = s.trans_a ? Shape{g.batch, s.k, s.m} : Shape{g.batch, s.m, s.k};
    const Shape b_shape = s.trans_b ? Shape{g.batch, s.n, s.k} : Shape{g.batch, s.k, s.n};
    operands.push_back(
        {operand(a_shape), operand(b_shape),
         Tensor::from_host(uniform(g.batch * s.m * s.n), {g.batch, s.m, s.n}, host0, *stream)});
    flops += gemm_flops(s.m, s.n, s.k) * static_cast<double>(g.batch * g.count);
  }
  const std::vector<StepGemm> gemms = gpt_step_gemms();
  auto one_step = [&] {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const GemmShape& s = gemms[i].shape;
      const Operands& o = operands[i];
      for (int64_t r = 0; r < gemms[i].count; ++r) {
        if (bf16) {
          matmul_batched_bf16(o.a, s.trans_a, o.b, s.trans_b, o.c, gemms[i].batch, 1.0f, s.beta,
                              *stream);
        } else {
          matmul_batched(o.a, s.trans_a, o.b, s.trans_b, o.c, gemms[i].batch, 1.0f, s.beta,
                         *stream, precision);
        }
      }
    }
    stream->synchronize();
  };
  one_step();  // warm-up: scratch, oneDNN primitives
  for (auto _ : state) one_step();
  state.counters["GFLOPs"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate,
                                                benchmark::Counter::kIs1000);
  state.SetLabel(precision == Precision::kBF16 && onednn::native_bf16_enabled()
                     ? "bf16 units (oneDNN)"
                     : (precision == Precision::kBF16 ? "bf16 emulated in f32" : "f32"));
}

void register_gemms(const BenchConfig& config) {
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    benchmark::RegisterBenchmark(
        (std::string("gemm/gpt4x256-step/host:0/") + precision_name(p)).c_str(),
        [p](benchmark::State& st) { run_step_gemms(st, p); })
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
  const Device host0{DeviceKind::kHost, 0};
  for (const GemmShape& s : model_gemms()) {
    benchmark::RegisterBenchmark(("gemm/host:0/" + s.name).c_str(),
                                 [s, host0](benchmark::State& st) { run_matmul(st, s, host0, 1); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("gemm/cblas/" + s.name).c_str(),
                                 [s](benchmark::State& st) { run_cblas(st, s); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  if (config.gpu_count == 0) return;
  const Device cuda0{DeviceKind::kCuda, 0};
  for (const GemmShape& s : model_gemms()) {
    benchmark::RegisterBenchmark(("gemm/cuda:0/" + s.name).c_str(),
                                 [s, cuda0](benchmark::State& st) { run_matmul(st, s, cuda0, 20); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
  // The GPU's GEMM rate: large square f32 GEMMs through the same path.
  for (const int64_t n : {4096, 8192}) {
    const GemmShape s{std::to_string(n), n, n, n, false, false, 0.0f};
    benchmark::RegisterBenchmark(("ceiling/gpu/gemm/cuda:0/" + s.name).c_str(),
                                 [s, cuda0](benchmark::State& st) { run_matmul(st, s, cuda0, 5); })
        ->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

const bool kRegistered = add_registrar(register_gemms);

}  // namespace
}  // namespace ls::bench
