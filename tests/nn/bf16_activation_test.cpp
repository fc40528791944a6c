// Activations stored in bf16 only (a bf16 step's pre-norm outputs: nn::layernorm's bf16_output):
// the products that read them give bit for bit what they gave from the f32 output's bf16 copy, in
// forward and backward; their gradients are f32; nn::to_f32 widens one and passes its gradient
// through; an f32 step keeps f32 and says so when handed bf16.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "tests/ops/op_test_util.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct Outcome {
  std::vector<float> y, dx, dw;
  DType norm_dtype;
};

// y = linear(layernorm(x)) summed by a squared error; bf16_output as asked.
Outcome run(bool bf16_output, Precision precision) {
  auto stream = device_runtime(kHost0).create_stream();
  const int64_t rows = 6, cols = 16, out = 8;
  Tape tape(*stream);
  ForwardContext context;
  context.training = true;
  context.precision = precision;
  tape.set_context(context);
  const auto param = [&](int64_t n, const Shape& shape, uint32_t seed) {
    return tape.differentiable_input(
        Tensor::from_host(test::random_vector(n, seed), shape, kHost0, *stream));
  };
  Var x = param(rows * cols, {rows, cols}, 1);
  Var gamma = param(cols, {cols}, 2), beta = param(cols, {cols}, 3);
  Var w = param(out * cols, {out, cols}, 4), b = param(out, {out}, 5);
  Var h = layernorm(tape, x, gamma, beta, 1e-5f, bf16_output);
  Var y = linear(tape, h, w, &b);
  const Tensor target = Tensor::from_host(std::vector<float>(static_cast<size_t>(rows * out), 0.5f),
                                          {rows, out}, kHost0, *stream);
  Var loss = squared_error_sum(tape, y, target);
  tape.backward(loss, Tensor::from_host(std::vector<float>{1.0f}, {1}, kHost0, *stream));
  Outcome r{y->value.to_host_f32(*stream), x->grad.to_host_f32(*stream),
            w->grad.to_host_f32(*stream), h->value.dtype()};
  stream->synchronize();
  return r;
}

TEST(Bf16Activation, ProductsReadTheBf16OutputAsTheyReadItsCopy) {
  const Outcome stored = run(true, Precision::kBF16), copied = run(false, Precision::kBF16);
  EXPECT_EQ(stored.norm_dtype, DType::kBF16);
  EXPECT_EQ(copied.norm_dtype, DType::kF32);
  EXPECT_TRUE(test::bitwise_equal(stored.y, copied.y));
  EXPECT_TRUE(test::bitwise_equal(stored.dx, copied.dx));
  EXPECT_TRUE(test::bitwise_equal(stored.dw, copied.dw));
}

TEST(Bf16Activation, AnF32StepKeepsF32) {
  EXPECT_EQ(run(true, Precision::kF32).norm_dtype, DType::kF32);
}

TEST(Bf16Activation, ToF32WidensAndPassesTheGradient) {
  auto stream = device_runtime(kHost0).create_stream();
  Tape tape(*stream);
  ForwardContext context;
  context.training = true;
  context.precision = Precision::kBF16;
  tape.set_context(context);
  const std::vector<float> values = test::random_vector(12, 9);
  Var x = tape.differentiable_input(Tensor::from_host(values, {3, 4}, kHost0, *stream));
  Var ones = tape.constant(Tensor::from_host(std::vector<float>(4, 1.0f), {4}, kHost0, *stream));
  Var zeros = tape.constant(Tensor::from_host(std::vector<float>(4, 0.0f), {4}, kHost0, *stream));
  Var h = layernorm(tape, x, ones, zeros, 1e-5f, /*bf16_output=*/true);
  ASSERT_EQ(h->value.dtype(), DType::kBF16);
  Var wide = to_f32(tape, h);
  EXPECT_EQ(wide->value.dtype(), DType::kF32);
  EXPECT_TRUE(wide->requires_grad);
  Var loss = scale(tape, wide, 3.0f);  // d loss / d h = 3 everywhere
  tape.backward(loss, Tensor::from_host(std::vector<float>(12, 1.0f), {3, 4}, kHost0, *stream));
  EXPECT_EQ(h->grad.dtype(), DType::kF32);
  for (float g : h->grad.to_host_f32(*stream)) EXPECT_EQ(g, 3.0f);
  // An f32 step's linear says what to do with a bf16 input.
  Tape f32_tape(*stream);
  Var w =
      f32_tape.constant(Tensor::from_host(std::vector<float>(8, 0.0f), {2, 4}, kHost0, *stream));
  try {
    linear(f32_tape, h, w, nullptr);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("to_f32"), std::string::npos) << e.what();
  }
  stream->synchronize();
}

}  // namespace
}  // namespace ls::nn
