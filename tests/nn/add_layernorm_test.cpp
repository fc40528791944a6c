// nn::add_layernorm (the residual add inside the LayerNorm that reads its sum) against nn::add
// then nn::layernorm: the same sum, norm and gradients, bit for bit, in f32 and in a bf16 step
// whose norm feeds products only. Both outputs are used, as in a pre-norm block: the sum goes on
// as the residual stream, the norm into a linear.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "ops/elementwise.h"
#include "tests/ops/op_test_util.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct Outcome {
  std::vector<float> sum, norm, loss, dx, dbranch, dgamma, dbeta, dw;
};

std::vector<float> widened(const Tensor& t, Stream& stream) {
  if (t.dtype() == DType::kF32) return t.to_host_f32(stream);
  Tensor wide = Tensor::empty(t.shape(), DType::kF32, t.device());
  cast(t, wide, stream);
  return wide.to_host_f32(stream);
}

// loss = sum (sum + linear(norm(x + branch)) - 0.5)^2, through the fused op or the two.
Outcome run(bool fused, Precision precision, bool to_products) {
  auto stream = device_runtime(kHost0).create_stream();
  const int64_t rows = 6, cols = 16;
  Tape tape(*stream);
  ForwardContext context;
  context.training = true;
  context.precision = precision;
  tape.set_context(context);
  const auto input = [&](int64_t n, const Shape& shape, uint32_t seed) {
    return tape.differentiable_input(
        Tensor::from_host(test::random_vector(n, seed, -2, 2), shape, kHost0, *stream));
  };
  Var x = input(rows * cols, {rows, cols}, 1), branch = input(rows * cols, {rows, cols}, 2);
  Var gamma = input(cols, {cols}, 3), beta = input(cols, {cols}, 4);
  Var w = input(cols * cols, {cols, cols}, 5);
  Var sum, norm;
  if (fused) {
    std::tie(sum, norm) = add_layernorm(tape, x, branch, gamma, beta, 1e-5f, to_products);
  } else {
    sum = add(tape, x, branch);
    norm = layernorm(tape, sum, gamma, beta, 1e-5f, to_products);
  }
  Var out = add(tape, sum, linear(tape, norm, w, nullptr));
  const Tensor target = Tensor::from_host(
      std::vector<float>(static_cast<size_t>(rows * cols), 0.5f), {rows, cols}, kHost0, *stream);
  Var loss = squared_error_sum(tape, out, target);
  tape.backward(loss, Tensor::from_host(std::vector<float>{1.0f}, {1}, kHost0, *stream));
  Outcome r{sum->value.to_host_f32(*stream),   widened(norm->value, *stream),
            loss->value.to_host_f32(*stream),  x->grad.to_host_f32(*stream),
            branch->grad.to_host_f32(*stream), gamma->grad.to_host_f32(*stream),
            beta->grad.to_host_f32(*stream),   w->grad.to_host_f32(*stream)};
  stream->synchronize();
  return r;
}

TEST(AddLayerNorm, IsAddThenLayerNormBitForBit) {
  for (const auto& [precision, to_products] : std::vector<std::pair<Precision, bool>>{
           {Precision::kF32, false}, {Precision::kBF16, true}, {Precision::kBF16, false}}) {
    SCOPED_TRACE(::testing::Message()
                 << precision_name(precision) << " to_products " << to_products);
    const Outcome fused = run(true, precision, to_products);
    const Outcome separate = run(false, precision, to_products);
    EXPECT_TRUE(test::bitwise_equal(fused.sum, separate.sum));
    EXPECT_TRUE(test::bitwise_equal(fused.norm, separate.norm));
    EXPECT_TRUE(test::bitwise_equal(fused.loss, separate.loss));
    for (const auto& [name, a, b] : {std::tuple{"dx", &fused.dx, &separate.dx},
                                     {"dbranch", &fused.dbranch, &separate.dbranch},
                                     {"dgamma", &fused.dgamma, &separate.dgamma},
                                     {"dbeta", &fused.dbeta, &separate.dbeta},
                                     {"dw", &fused.dw, &separate.dw}}) {
      EXPECT_TRUE(test::bitwise_equal(*a, *b)) << name;
    }
  }
}

TEST(AddLayerNorm, RefusesMismatchedShapes) {
  auto stream = device_runtime(kHost0).create_stream();
  Tape tape(*stream);
  Var x = tape.constant(Tensor::from_host(std::vector<float>(12, 1.0f), {3, 4}, kHost0, *stream));
  Var branch =
      tape.constant(Tensor::from_host(std::vector<float>(8, 1.0f), {2, 4}, kHost0, *stream));
  Var gamma = tape.constant(Tensor::from_host(std::vector<float>(4, 1.0f), {4}, kHost0, *stream));
  Var beta = tape.constant(Tensor::from_host(std::vector<float>(4, 0.0f), {4}, kHost0, *stream));
  EXPECT_THROW(
      {
        try {
          add_layernorm(tape, x, branch, gamma, beta, 1e-5f);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("branch f32[2, 4]"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  stream->synchronize();
}

}  // namespace
}  // namespace ls::nn
