// Issue 12's CUDA kernels: bf16/f16 GEMMs against the host emulation (operands rounded with
// round_to, f32 products summed in double), softmax_xent's device_scale, the StepControl-gated
// optimizers (skip leaves everything bitwise unchanged, inv_scale unscales, AdamW's step comes
// from the control) and the step_control kernels over a loss-scale schedule. Every test skips
// without a GPU; where the host backend has the same op, both backends run the same arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <lockstep/clock.h>
#include <lockstep/precision.h>
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/optim.h"
#include "ops/softmax_xent.h"
#include "ops/step_control.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

template <typename Table>
const Table& ops_of(DeviceKind kind) {
  const Table* table = find_op_table<Table>(kind);
  if (table == nullptr) throw std::runtime_error("no kernel table for this backend");
  return *table;
}

class CudaStepOpsTest : public CudaVsHostTest {
 protected:
  // A StepControl block as the i32 tensor the ops take, on both devices.
  Pair upload_control(const StepControl& control) {
    std::vector<int32_t> words(kStepControlWords);
    std::memcpy(words.data(), &control, sizeof(StepControl));
    return upload_i32(words, {kStepControlWords});
  }
  static StepControl control_of(const std::vector<int32_t>& words) {
    StepControl control{};
    std::memcpy(static_cast<void*>(&control), words.data(), sizeof(StepControl));
    return control;
  }
  StepControl cuda_control(const Pair& p) { return control_of(p.cuda.to_host_i32(*cuda_)); }
  StepControl host_control(const Pair& p) { return control_of(p.host.to_host_i32(*host_)); }
};

// ---- GEMM with 16-bit operands -----------------------------------------------------------------

// C = alpha op(A) op(B) + beta C for `batch` matrices, the operands rounded to `precision` and
// the products summed in double: what cuBLAS computes up to the f32 summation order. Also
// returns, in `magnitude`, sum |alpha a b| + |beta c| per element, the scale of that error.
struct GemmShape {
  int64_t m, n, k, lda, ldb, ldc, stride_a, stride_b, stride_c, batch;
  bool ta, tb;
};

std::vector<double> reference_gemm(const GemmShape& s, Precision precision, float alpha,
                                   const std::vector<float>& a, const std::vector<float>& b,
                                   float beta, const std::vector<float>& c,
                                   std::vector<double>& magnitude) {
  std::vector<double> out(c.begin(), c.end());
  magnitude.assign(c.size(), 0.0);
  for (int64_t q = 0; q < s.batch; ++q) {
    for (int64_t i = 0; i < s.m; ++i) {
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0.0, size = 0.0;
        for (int64_t p = 0; p < s.k; ++p) {
          const float av = a[q * s.stride_a + (s.ta ? p * s.lda + i : i * s.lda + p)];
          const float bv = b[q * s.stride_b + (s.tb ? j * s.ldb + p : p * s.ldb + j)];
          const double product = static_cast<double>(round_to(precision, av)) *
                                 static_cast<double>(round_to(precision, bv));
          sum += product;
          size += std::abs(product);
        }
        const int64_t e = q * s.stride_c + i * s.ldc + j;
        out[e] = alpha * sum + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c[e]));
        magnitude[e] = std::abs(alpha) * size + std::abs(beta * static_cast<double>(c[e]));
      }
    }
  }
  return out;
}

// f32 accumulation of k exact products: |error| <= k * 2^-24 * sum |products| (plus the rounding
// of the result); 2^-22 per term leaves room for cuBLAS's split-k and tensor-core ordering.
void expect_gemm_close(const GemmShape& s, const std::vector<float>& got,
                       const std::vector<double>& want, const std::vector<double>& magnitude) {
  const double per_term = std::ldexp(1.0, -22);
  for (size_t e = 0; e < got.size(); ++e) {
    const double tolerance = (static_cast<double>(s.k) + 2.0) * per_term * magnitude[e] + 1e-30;
    ASSERT_LE(std::abs(got[e] - want[e]), tolerance)
        << "element " << e << ": got " << got[e] << ", want " << want[e];
  }
}

TEST_F(CudaStepOpsTest, SixteenBitGemmEqualsTheHostEmulation) {
  const std::vector<std::array<int64_t, 3>> sizes = {
      {1, 1, 1}, {3, 5, 7}, {17, 33, 9}, {64, 128, 96}, {129, 257, 65}};
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    for (const auto& [m, k, n] : sizes) {
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const int64_t pad = 3;
        GemmShape s{m, n, k, (ta ? m : k) + pad, (tb ? k : n) + pad, n + pad, 0, 0, 0, 1, ta, tb};
        SCOPED_TRACE(testing::Message() << precision_name(precision) << " " << m << "x" << k << "x"
                                        << n << " ta=" << ta << " tb=" << tb);
        const auto a = random_vector(static_cast<size_t>((ta ? k : m) * s.lda), 1, -2.0f, 2.0f);
        const auto b = random_vector(static_cast<size_t>((tb ? n : k) * s.ldb), 2, -2.0f, 2.0f);
        auto c = random_vector(static_cast<size_t>(m * s.ldc), 3);
        Pair pa = upload(a, {static_cast<int64_t>(a.size())});
        Pair pb = upload(b, {static_cast<int64_t>(b.size())});
        Pair pc = upload(c, {static_cast<int64_t>(c.size())});
        ops_of<GemmOps>(DeviceKind::kCuda)
            .gemm(ta, tb, m, n, k, 0.75f, pa.cuda.f32(), s.lda, pb.cuda.f32(), s.ldb, 1.0f,
                  pc.cuda.f32(), s.ldc, precision, *cuda_);
        std::vector<double> magnitude;
        const auto want = reference_gemm(s, precision, 0.75f, a, b, 1.0f, c, magnitude);
        expect_gemm_close(s, cuda_values(pc), want, magnitude);
      }
    }
  }
}

// The batch strides leave gaps between the matrices (the 16-bit copies span them), and the
// result must show the rounding: an f32 GEMM would be further from the emulation than this.
TEST_F(CudaStepOpsTest, SixteenBitStridedBatchedGemmEqualsTheHostEmulation) {
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    SCOPED_TRACE(precision_name(precision));
    const int64_t m = 19, n = 23, k = 70, batch = 3;
    GemmShape s{m, n, k, m + 1, k + 2, n, 0, 0, 0, batch, true, true};
    s.stride_a = k * s.lda + 5;
    s.stride_b = n * s.ldb + 11;
    s.stride_c = m * s.ldc + 7;
    const auto a = random_vector(static_cast<size_t>(batch * s.stride_a), 4);
    const auto b = random_vector(static_cast<size_t>(batch * s.stride_b), 5);
    const auto c = random_vector(static_cast<size_t>(batch * s.stride_c), 6);
    Pair pa = upload(a, {static_cast<int64_t>(a.size())});
    Pair pb = upload(b, {static_cast<int64_t>(b.size())});
    Pair pc = upload(c, {static_cast<int64_t>(c.size())});
    ops_of<GemmOps>(DeviceKind::kCuda)
        .gemm_strided_batched(true, true, m, n, k, 1.0f, pa.cuda.f32(), s.lda, s.stride_a,
                              pb.cuda.f32(), s.ldb, s.stride_b, 0.0f, pc.cuda.f32(), s.ldc,
                              s.stride_c, batch, precision, *cuda_);
    std::vector<double> magnitude, unused;
    const auto want = reference_gemm(s, precision, 1.0f, a, b, 0.0f, c, magnitude);
    const auto got = cuda_values(pc);
    expect_gemm_close(s, got, want, magnitude);  // the gaps between the C matrices keep c
    const auto unrounded = reference_gemm(s, Precision::kF32, 1.0f, a, b, 0.0f, c, unused);
    double farthest = 0.0;
    for (size_t e = 0; e < got.size(); ++e) {
      farthest = std::max(farthest, std::abs(got[e] - unrounded[e]));
    }
    EXPECT_GT(farthest, 1e-4) << "the operands do not look rounded to "
                              << precision_name(precision);
  }
}

// The checked op on both backends: matmul with a precision (host: operands rounded, f32 GEMM).
TEST_F(CudaStepOpsTest, MatmulWithPrecisionMatchesTheHostBackend) {
  const int64_t m = 33, k = 64, n = 17;
  for (Precision precision : {Precision::kBF16, Precision::kF16}) {
    SCOPED_TRACE(precision_name(precision));
    Pair a = upload(random_vector(m * k, 7), {m, k});
    Pair b = upload(random_vector(k * n, 8), {k, n});
    Pair c = empty({m, n});
    run_both([&](Stream& stream, auto side) {
      matmul(side(a), false, side(b), false, side(c), 1.0f, 0.0f, stream, precision);
    });
    expect_close(c, 1e-5, 1e-4);
  }
}

// ---- softmax_xent with a device scale -----------------------------------------------------------

TEST_F(CudaStepOpsTest, SoftmaxXentDeviceScaleMultipliesTheGradient) {
  const int64_t rows = 37, cols = 300;
  Pair logits = upload(random_vector(rows * cols, 1, -6.0f, 6.0f), {rows, cols});
  Pair labels = upload_i32(random_labels(rows, static_cast<int32_t>(cols), 2), {rows});
  for (float device_value : {4.0f, 3.0f}) {
    SCOPED_TRACE(testing::Message() << "device_scale=" << device_value);
    Pair scale = upload({device_value}, {1});
    Pair loss = empty({1}), plain_loss = empty({1});
    Pair scaled = empty({rows, cols}), plain = empty({rows, cols});
    const float grad_scale = 1.0f / static_cast<float>(rows);
    run_both([&](Stream& stream, auto side) {
      softmax_xent(side(logits), side(labels), side(loss), side(scaled), grad_scale, stream,
                   side(scale));
      softmax_xent(side(logits), side(labels), side(plain_loss), side(plain), grad_scale, stream);
    });
    expect_close(scaled, 1e-5, 1e-7);
    EXPECT_TRUE(bitwise_equal(cuda_values(loss), cuda_values(plain_loss)));
    // ((p - y) * grad_scale) * s: a power of two scales exactly.
    const auto got = cuda_values(scaled), base = cuda_values(plain);
    std::vector<double> want(base.size());
    for (size_t i = 0; i < base.size(); ++i) want[i] = static_cast<double>(base[i] * device_value);
    if (device_value == 4.0f) {
      EXPECT_TRUE(bitwise_equal(got, std::vector<float>(want.begin(), want.end())));
    } else {
      EXPECT_TRUE(all_close(got, want, 1e-6, 0.0));
    }
  }
}

// ---- optimizers gated by a StepControl ----------------------------------------------------------

StepControl decided_control(int32_t skip, float inv_scale, int32_t optimizer_steps) {
  StepControl c{};
  c.loss_scale = 1.0f / inv_scale;
  c.skip = skip;
  c.inv_scale = inv_scale;
  c.optimizer_steps = optimizer_steps;
  c.labels = 1.0f;
  return c;
}

TEST_F(CudaStepOpsTest, SkippedStepLeavesParametersAndStateBitwiseUnchanged) {
  const int64_t n = 70001;
  Pair control = upload_control(decided_control(1, 0.5f, 3));
  Pair param = upload(random_vector(n, 1), {n}), grad = upload(random_vector(n, 2), {n});
  Pair buf = upload(random_vector(n, 3), {n}), m = upload(random_vector(n, 4), {n});
  Pair v = upload(random_vector(n, 5, 0.0f, 1.0f), {n});
  const auto before = {cuda_values(param), cuda_values(buf), cuda_values(m), cuda_values(v)};
  sgd_step(param.cuda, grad.cuda, buf.cuda, SgdConfig{0.1f, 0.9f, 0.01f}, *cuda_, control.cuda);
  adamw_step(param.cuda, grad.cuda, m.cuda, v.cuda, AdamWConfig{}, 0, *cuda_, control.cuda);
  const auto after = {cuda_values(param), cuda_values(buf), cuda_values(m), cuda_values(v)};
  auto b = before.begin();
  for (auto a = after.begin(); a != after.end(); ++a, ++b) EXPECT_TRUE(bitwise_equal(*a, *b));
}

// Gradients scaled by 4 and a control with inv_scale 1/4 (exact) give the ungated step on the
// plain gradients: bitwise for SGD without weight decay (g * 1/4 is then exactly g).
TEST_F(CudaStepOpsTest, GatedSgdUnscalesTheGradients) {
  const int64_t n = 1000;
  const auto grad_values = random_vector(n, 2);
  std::vector<float> scaled_values(grad_values);
  for (float& g : scaled_values) g *= 4.0f;
  for (float weight_decay : {0.0f, 0.01f}) {
    SCOPED_TRACE(testing::Message() << "weight_decay=" << weight_decay);
    const SgdConfig config{0.1f, 0.9f, weight_decay};
    Pair control = upload_control(decided_control(0, 0.25f, 1));
    Pair gated = upload(random_vector(n, 1), {n}), plain = upload(random_vector(n, 1), {n});
    Pair gated_buf = upload(std::vector<float>(n, 0.0f), {n});
    Pair plain_buf = upload(std::vector<float>(n, 0.0f), {n});
    Pair grad = upload(grad_values, {n}), scaled = upload(scaled_values, {n});
    for (int step = 0; step < 3; ++step) {
      run_both([&](Stream& stream, auto side) {
        sgd_step(side(gated), side(scaled), side(gated_buf), config, stream, side(control));
        sgd_step(side(plain), side(grad), side(plain_buf), config, stream);
      });
    }
    expect_close(gated);  // CUDA against the host backend, both gated
    if (weight_decay == 0.0f) {
      EXPECT_TRUE(bitwise_equal(cuda_values(gated), cuda_values(plain)));
    } else {
      EXPECT_TRUE(all_close(cuda_values(gated), to_double(cuda_values(plain)), 1e-6, 1e-7));
    }
  }
}

// AdamW takes its step from the control (the `step` argument is ignored) and unscales.
TEST_F(CudaStepOpsTest, GatedAdamWTakesItsStepFromTheControl) {
  const int64_t n = 70001;
  const AdamWConfig config{1e-2f, 0.9f, 0.999f, 1e-8f, 0.01f};
  const auto grad_values = random_vector(n, 2);
  std::vector<float> scaled_values(grad_values);
  for (float& g : scaled_values) g *= 8.0f;
  Pair grad = upload(grad_values, {n}), scaled = upload(scaled_values, {n});
  Pair gated = upload(random_vector(n, 1), {n}), plain = upload(random_vector(n, 1), {n});
  Pair gm = upload(random_vector(n, 3), {n}), pm = upload(random_vector(n, 3), {n});
  Pair gv = upload(random_vector(n, 4, 0.0f, 1.0f), {n});
  Pair pv = upload(random_vector(n, 4, 0.0f, 1.0f), {n});
  for (int32_t step : {1, 7, 1000}) {
    SCOPED_TRACE(testing::Message() << "step=" << step);
    Pair control = upload_control(decided_control(0, 0.125f, step));
    run_both([&](Stream& stream, auto side) {
      adamw_step(side(gated), side(scaled), side(gm), side(gv), config, /*step=*/1, stream,
                 side(control));
      adamw_step(side(plain), side(grad), side(pm), side(pv), config, step, stream);
    });
    expect_close(gated, 1e-5, 1e-6);  // against the host backend, both gated
    EXPECT_TRUE(all_close(cuda_values(gated), to_double(cuda_values(plain)), 1e-6, 1e-7));
    EXPECT_TRUE(bitwise_equal(cuda_values(gm), cuda_values(pm)));  // m, v: g * 1/8 is exact
    EXPECT_TRUE(bitwise_equal(cuda_values(gv), cuda_values(pv)));
  }
}

// ---- step_control kernels -----------------------------------------------------------------------

// A schedule of good and bad steps through step_begin, step_decide and update_loss_scale, on both
// backends, each step checked bitwise against the shared rules applied here.
TEST_F(CudaStepOpsTest, StepControlFollowsTheLossScaleSchedule) {
  LossScaleConfig config;
  config.dynamic = true;
  config.initial_scale = 8.0f;
  config.growth_interval = 2;
  config.min_scale = 1.0f;
  config.max_scale = 32.0f;
  StepControl want{};
  want.loss_scale = config.initial_scale;
  want.labels = 6.0f;
  Pair control = upload_control(want);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  // {loss sum, non-finite count}: good steps grow the scale to the maximum, bad ones (a count, a
  // NaN or infinite loss) back it off to the minimum.
  const std::vector<std::array<float, 2>> steps = {
      {1, 0}, {2, 0}, {nan, 0}, {3, 2}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0}, {1, 0},
      {1, 0}, {1, 0}, {inf, 0}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, {2, 0}};
  for (size_t i = 0; i < steps.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    Pair loss_and_count = upload({steps[i][0], steps[i][1]}, {2});
    run_both([&](Stream& stream, auto side) {
      step_begin(side(control), stream);
      step_decide(side(control), side(loss_and_count), stream);
      update_loss_scale(side(control), config, stream);
    });
    want.grad_seed = want.loss_scale / want.labels;
    want.inv_scale = 1.0f / want.loss_scale;
    apply_step_decision(want, steps[i][0], steps[i][1]);
    apply_loss_scale_rule(want, config);
    for (const StepControl& got : {cuda_control(control), host_control(control)}) {
      EXPECT_EQ(std::memcmp(&got, &want, sizeof(StepControl)), 0)
          << "loss_scale " << got.loss_scale << " (want " << want.loss_scale << "), skip "
          << got.skip << " (" << want.skip << "), optimizer_steps " << got.optimizer_steps << " ("
          << want.optimizer_steps << "), good_steps " << got.good_steps << " (" << want.good_steps
          << ")";
    }
  }
  // The schedule went through the maximum (32, step 11) and the minimum (1, steps 16-18).
  EXPECT_EQ(want.loss_scale, 1.0f);
  EXPECT_EQ(want.optimizer_steps, 11);  // 20 steps, 9 of them skipped
}

// The clock stamps of a step's timeline (issue 25): written when the stream reaches them, in
// stream order, on each device's own clock (nanoseconds; the host's is the steady clock).
TEST_F(CudaStepOpsTest, ClockStampsAreWrittenInStreamOrder) {
  Pair marks = upload_i32(std::vector<int32_t>(6, 0), {6});
  Pair work = empty({1 << 20});
  const auto now_ns = steady_now_ns;
  const int64_t before = now_ns();
  run_both([&](Stream& stream, auto side) {
    stamp_device_clock(side(marks), 0, stream);
    fill(side(work), 1.0f, stream);
    stamp_device_clock(side(marks), 1, stream);
    stamp_device_clock(side(marks), 2, stream);
  });
  cuda_->synchronize();
  host_->synchronize();
  const int64_t after = now_ns();
  for (const auto& [name, words] :
       {std::pair{"cuda", marks.cuda.to_host_i32(*cuda_)}, std::pair{"host", marks.host.to_host_i32(*host_)}}) {
    int64_t t[3];
    std::memcpy(t, words.data(), sizeof t);
    EXPECT_GT(t[0], 0) << name;
    EXPECT_LE(t[0], t[1]) << name;
    EXPECT_LE(t[1], t[2]) << name;
    if (std::string(name) == "host") {  // the steady clock this test reads too
      EXPECT_GE(t[0], before);
      EXPECT_LE(t[2], after);
    }
  }
  EXPECT_THROW(stamp_device_clock(marks.host, 3, *host_), Error);  // marks hold three
}

}  // namespace
}  // namespace ls::test
