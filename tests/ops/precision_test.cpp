// Mixed precision's rounding and the step control on the host backend (issue 12): f16 and bf16
// rounding against known values, emulated 16-bit GEMMs equal to f32 GEMMs of the rounded operands
// bitwise (the host emulates cuBLAS's 16-bit operands with f32 accumulation exactly that way; the
// native bf16 path on the CPU's bf16 units is tested in onednn_matmul_test.cpp), the device-side
// step decision, the loss-scale schedule, and gated optimizer steps.
#include <lockstep/precision.h>

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "op_test_util.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/host/onednn_matmul.h"
#include "ops/optim.h"
#include "ops/step_control.h"

namespace ls::test {
namespace {

TEST(Precision, NamesParseBack) {
  for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kF16}) {
    EXPECT_EQ(parse_precision(precision_name(p)), p);
  }
  EXPECT_FALSE(parse_precision("fp16").has_value());
}

TEST(Precision, F16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(round_to_f16(1.0f), 1.0f);
  EXPECT_EQ(round_to_f16(65504.0f), 65504.0f);  // the largest half
  EXPECT_EQ(round_to_f16(65519.0f), 65504.0f);  // below the halfway point
  EXPECT_EQ(round_to_f16(65520.0f), inf);       // halfway: ties to even, past the range
  EXPECT_EQ(round_to_f16(-1e6f), -inf);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1); 1 + 3 * 2^-11 rounds up.
  EXPECT_EQ(round_to_f16(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_EQ(round_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 1.0f + std::ldexp(1.0f, -9));
  EXPECT_EQ(round_to_f16(0.1f), 0.0999755859375f);
  // Subnormals are multiples of 2^-24; half of that and less flushes to (signed) zero.
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -24)), std::ldexp(1.0f, -24));
  EXPECT_EQ(round_to_f16(std::ldexp(3.0f, -26)), std::ldexp(1.0f, -24));  // 0.75 ulp: up
  EXPECT_EQ(round_to_f16(std::ldexp(1.0f, -25)), 0.0f);                   // halfway: even (0)
  EXPECT_TRUE(std::signbit(round_to_f16(-std::ldexp(1.0f, -26))));
  EXPECT_EQ(round_to_f16(std::ldexp(5.0f, -24)), std::ldexp(5.0f, -24));
  EXPECT_TRUE(std::isnan(round_to_f16(std::nanf(""))));
}

TEST(Precision, Bf16KeepsEightSignificantBits) {
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);  // halfway: even
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_EQ(round_to_bf16(3.0e38f), 3.00405527e38f);  // no overflow: f32's exponent range
  EXPECT_EQ(round_to(Precision::kF32, 0.1f), 0.1f);
}

// The emulated path: the host GEMM rounds the operands and multiplies in f32.
class PrecisionOps : public OpTestBase {
 protected:
  void SetUp() override {
    OpTestBase::SetUp();
    native_was_ = onednn::native_bf16_enabled();
    onednn::set_native_bf16_enabled(false);
  }
  void TearDown() override {
    onednn::set_native_bf16_enabled(native_was_);
    OpTestBase::TearDown();
  }

 private:
  bool native_was_ = false;
};

TEST_F(PrecisionOps, SixteenBitGemmIsTheF32GemmOfRoundedOperands) {
  const int64_t m = 37, n = 29, k = 53;
  const std::vector<float> a = random_vector(m * k, 1), b = random_vector(k * n, 2);
  for (Precision p : {Precision::kBF16, Precision::kF16}) {
    std::vector<float> ra = a, rb = b;
    for (float& v : ra) v = round_to(p, v);
    for (float& v : rb) v = round_to(p, v);
    Tensor c16 = Tensor::empty({m, n}, DType::kF32, dev_),
           c32 = Tensor::empty({m, n}, DType::kF32, dev_);
    matmul(upload(a, {m, k}), false, upload(b, {k, n}), false, c16, 1.0f, 0.0f, *stream_, p);
    matmul(upload(ra, {m, k}), false, upload(rb, {k, n}), false, c32, 1.0f, 0.0f, *stream_);
    EXPECT_EQ(c16.to_host_f32(*stream_), c32.to_host_f32(*stream_)) << precision_name(p);
    // And the rounding shows: the f32 product of the raw operands differs.
    Tensor raw = Tensor::empty({m, n}, DType::kF32, dev_);
    matmul(upload(a, {m, k}), false, upload(b, {k, n}), false, raw, 1.0f, 0.0f, *stream_);
    EXPECT_NE(raw.to_host_f32(*stream_), c32.to_host_f32(*stream_)) << precision_name(p);
  }
}

TEST_F(PrecisionOps, SixteenBitBatchedGemmRoundsEveryMatrix) {
  const int64_t batch = 3, m = 5, n = 4, k = 6;
  const std::vector<float> a = random_vector(batch * k * m, 3), b = random_vector(batch * k * n, 4);
  std::vector<float> ra = a, rb = b;
  for (float& v : ra) v = round_to_bf16(v);
  for (float& v : rb) v = round_to_bf16(v);
  Tensor c16 = Tensor::empty({batch, m, n}, DType::kF32, dev_);
  Tensor c32 = Tensor::empty({batch, m, n}, DType::kF32, dev_);
  matmul_batched(upload(a, {batch, k, m}), true, upload(b, {batch, k, n}), false, c16, batch, 1.0f,
                 0.0f, *stream_, Precision::kBF16);
  matmul_batched(upload(ra, {batch, k, m}), true, upload(rb, {batch, k, n}), false, c32, batch,
                 1.0f, 0.0f, *stream_);
  EXPECT_EQ(c16.to_host_f32(*stream_), c32.to_host_f32(*stream_));
}

// A StepControl through the ops, read back after each call.
class StepControlOps : public OpTestBase {
 protected:
  void SetUp() override {
    OpTestBase::SetUp();
    control_ = Tensor::empty({kStepControlWords}, DType::kI32, dev_);
    write({.loss_scale = 1024.0f, .labels = 8.0f});
  }
  void write(StepControl c) {
    control_.copy_from_host_async(&c, sizeof c, *stream_);
    stream_->synchronize();
  }
  StepControl read() {
    StepControl c{};
    control_.copy_to_host_async(&c, sizeof c, *stream_);
    stream_->synchronize();
    return c;
  }
  Tensor control_;
};

TEST_F(StepControlOps, BeginSetsTheLossGradientScaleAndItsInverse) {
  step_begin(control_, *stream_);
  const StepControl c = read();
  EXPECT_EQ(c.grad_seed, 128.0f);  // 1024 / 8 labels
  EXPECT_EQ(c.inv_scale, 1.0f / 1024.0f);
}

TEST_F(StepControlOps, DecideSkipsOnNonFiniteLossOrGradientsAndCountsTheRest) {
  const float nan = std::nanf(""), inf = std::numeric_limits<float>::infinity();
  struct Case {
    float loss, nonfinite;
    int32_t skip;
  };
  int32_t steps = 0;
  for (const Case& c : {Case{2.5f, 0, 0}, Case{2.5f, 3, 1}, Case{nan, 0, 1}, Case{-inf, 0, 1},
                        Case{inf, 0, 1}, Case{0.0f, 0, 0}}) {
    step_decide(control_, upload({c.loss, c.nonfinite}, {2}), *stream_);
    const StepControl got = read();
    EXPECT_EQ(got.skip, c.skip) << c.loss << " " << c.nonfinite;
    steps += 1 - c.skip;
    EXPECT_EQ(got.optimizer_steps, steps);
  }
}

TEST_F(StepControlOps, DynamicLossScaleBacksOffOnSkipsAndGrowsAfterTheInterval) {
  LossScaleConfig config;
  config.initial_scale = 1024.0f;
  config.growth_interval = 3;
  config.min_scale = 256.0f;
  config.max_scale = 4096.0f;
  // skip: 1 = overflow this step. Expected scale and good-step count after each.
  struct Expect {
    int32_t skip;
    float scale;
    int32_t good;
  };
  const std::vector<Expect> schedule{
      {0, 1024, 1}, {0, 1024, 2}, {0, 2048, 0},  // grows after 3 good steps
      {1, 1024, 0},                              // backs off, count reset
      {1, 512, 0},  {1, 256, 0},  {1, 256, 0},   // not below min_scale
      {0, 256, 1},  {0, 256, 2},  {0, 512, 0},  {0, 512, 1},  {0, 512, 2},
      {0, 1024, 0}, {0, 1024, 1}, {0, 1024, 2}, {0, 2048, 0}, {0, 2048, 1},
      {0, 2048, 2}, {0, 4096, 0}, {0, 4096, 1}, {0, 4096, 2}, {0, 4096, 0},  // not above max_scale
  };
  for (size_t i = 0; i < schedule.size(); ++i) {
    StepControl c = read();
    c.skip = schedule[i].skip;
    write(c);
    update_loss_scale(control_, config, *stream_);
    const StepControl got = read();
    EXPECT_EQ(got.loss_scale, schedule[i].scale) << "step " << i;
    EXPECT_EQ(got.good_steps, schedule[i].good) << "step " << i;
  }
  config.dynamic = false;  // a static scale never moves
  StepControl c = read();
  c.skip = 1;
  write(c);
  update_loss_scale(control_, config, *stream_);
  EXPECT_EQ(read().loss_scale, c.loss_scale);
}

TEST_F(StepControlOps, BadLossScaleConfigsAreClearErrors) {
  for (auto bad : {LossScaleConfig{.initial_scale = 0}, LossScaleConfig{.growth = 1},
                   LossScaleConfig{.backoff = 1}, LossScaleConfig{.growth_interval = 0},
                   LossScaleConfig{.min_scale = 8, .max_scale = 4}}) {
    EXPECT_THROW(update_loss_scale(control_, bad, *stream_), Error);
  }
  EXPECT_THROW(step_begin(Tensor::empty({4}, DType::kI32, dev_), *stream_), Error);
}

TEST_F(StepControlOps, GatedOptimizersSkipOrUnscale) {
  const std::vector<float> p0 = random_vector(100, 5), g = random_vector(100, 6);
  for (const bool adamw : {false, true}) {
    Tensor p = upload(p0, {100}), grad = upload(g, {100});
    Tensor m = upload(std::vector<float>(100, 0.0f), {100});
    Tensor v = upload(std::vector<float>(100, 0.0f), {100});
    auto step = [&](const Tensor& params, const Tensor& grads, const Tensor& control,
                    const Tensor& copy = Tensor()) {
      if (adamw) {
        adamw_step(params, grads, m, v, AdamWConfig{}, 1, *stream_, control, copy);
      } else {
        sgd_step(params, grads, Tensor(), SgdConfig{0.1f}, *stream_, control, copy);
      }
    };
    write({.loss_scale = 4.0f, .optimizer_steps = 1, .skip = 1, .inv_scale = 0.25f});
    const Tensor copy = cast_to_bf16(p, *stream_);  // the bf16 copy of the parameters
    step(p, grad, control_, copy);
    EXPECT_EQ(p.to_host_f32(*stream_), p0) << "a skipped step changed the parameters";
    std::vector<uint16_t> bits(p0.size());
    copy.copy_to_host_async(bits.data(), bits.size() * sizeof(uint16_t), *stream_);
    stream_->synchronize();
    for (size_t i = 0; i < p0.size(); ++i)
      ASSERT_EQ(bits[i], f32_to_bf16(p0[i])) << "a skipped step changed the bf16 copy at " << i;
    // Unskipped: the gradient times 1/4 is the ungated step on a quarter of the gradient.
    write({.loss_scale = 4.0f, .optimizer_steps = 1, .skip = 0, .inv_scale = 0.25f});
    step(p, grad, control_);
    std::vector<float> quarter = g;
    for (float& x : quarter) x *= 0.25f;
    Tensor want = upload(p0, {100});
    m = upload(std::vector<float>(100, 0.0f), {100});
    v = upload(std::vector<float>(100, 0.0f), {100});
    step(want, upload(quarter, {100}), Tensor());
    EXPECT_EQ(p.to_host_f32(*stream_), want.to_host_f32(*stream_)) << (adamw ? "adamw" : "sgd");
  }
}

}  // namespace
}  // namespace ls::test
