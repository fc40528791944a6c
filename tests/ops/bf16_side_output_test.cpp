// The bf16 copies some ops write beside their f32 result in bf16 steps (LayerNorm, bias + GELU:
// VarNode::value16, which nn::linear multiplies instead of casting): bit for bit the cast of the
// f32 result, which is unchanged by asking for the copy. Host kernels here; the CUDA kernels in
// tests/ops/cuda_layer_ops_test.cpp and cuda_fused_attention_test.cpp.
#include <gtest/gtest.h>

#include <vector>

#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/layernorm.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class Bf16SideOutputTest : public OpTestBase {
 protected:
  // y16 widened back to f32, and cast(y) likewise: equal bit for bit when y16 is cast(y).
  void expect_rounded_copy(const Tensor& y, const Tensor& y16) {
    const Tensor rounded = cast_to_bf16(y, *stream_);
    Tensor a = Tensor::empty(y.shape(), DType::kF32, dev_);
    Tensor b = Tensor::empty(y.shape(), DType::kF32, dev_);
    cast(y16, a, *stream_);
    cast(rounded, b, *stream_);
    EXPECT_TRUE(bitwise_equal(download(a), download(b)));
  }
};

TEST_F(Bf16SideOutputTest, LayerNormWritesItsOutputRounded) {
  const int64_t rows = 7, cols = 96;
  const Tensor x = upload(random_vector(rows * cols, 1, -3, 3), {rows, cols});
  const Tensor gamma = upload(random_vector(cols, 2), {cols}), beta = upload(random_vector(cols, 3), {cols});
  const auto run = [&](const Tensor& y16) {
    Tensor y = Tensor::empty({rows, cols}, DType::kF32, dev_);
    Tensor mean = Tensor::empty({rows}, DType::kF32, dev_), rstd = Tensor::empty({rows}, DType::kF32, dev_);
    layernorm(x, gamma, beta, 1e-5f, y, mean, rstd, *stream_, y16);
    return y;
  };
  const Tensor y16 = Tensor::empty({rows, cols}, DType::kBF16, dev_);
  const Tensor y = run(y16);
  EXPECT_TRUE(bitwise_equal(download(y), download(run(Tensor()))));
  expect_rounded_copy(y, y16);
  Tensor mean = Tensor::empty({rows}, DType::kF32, dev_), rstd = Tensor::empty({rows}, DType::kF32, dev_);
  EXPECT_THROW(layernorm(x, gamma, beta, 1e-5f, y, mean, rstd, *stream_,
                         Tensor::empty({rows, cols}, DType::kF32, dev_)),
               Error);
  // y16 alone (a bf16 step's pre-norm): the same bits, and the same mean and rstd.
  const Tensor only16 = Tensor::empty({rows, cols}, DType::kBF16, dev_);
  Tensor mean16 = Tensor::empty({rows}, DType::kF32, dev_),
         rstd16 = Tensor::empty({rows}, DType::kF32, dev_);
  layernorm(x, gamma, beta, 1e-5f, Tensor(), mean16, rstd16, *stream_, only16);
  expect_rounded_copy(y, only16);
  layernorm(x, gamma, beta, 1e-5f, y, mean, rstd, *stream_);
  EXPECT_TRUE(bitwise_equal(download(mean), download(mean16)));
  EXPECT_TRUE(bitwise_equal(download(rstd), download(rstd16)));
  EXPECT_THROW(layernorm(x, gamma, beta, 1e-5f, Tensor(), mean, rstd, *stream_), Error);
}

TEST_F(Bf16SideOutputTest, BiasGeluWritesItsOutputRounded) {
  const int64_t rows = 5, cols = 64;
  const Tensor x = upload(random_vector(rows * cols, 4, -4, 4), {rows, cols});
  const Tensor bias = upload(random_vector(cols, 5), {cols});
  for (bool erf : {false, true}) {
    const Tensor y = Tensor::empty({rows, cols}, DType::kF32, dev_);
    const Tensor plain = Tensor::empty({rows, cols}, DType::kF32, dev_);
    const Tensor y16 = Tensor::empty({rows, cols}, DType::kBF16, dev_);
    bias_gelu(x, bias, y, erf, *stream_, y16);
    bias_gelu(x, bias, plain, erf, *stream_);
    EXPECT_TRUE(bitwise_equal(download(y), download(plain)));
    expect_rounded_copy(y, y16);
  }
}

}  // namespace
}  // namespace ls::test
