// The CUDA kernels that read or write the bf16 tensors a bf16 step passes between ops, against the
// host's: bias_grad of a bf16 dy (ops/cuda/bias.cu), softmax_xent of bf16 logits, its bf16
// gradient written over them (ops/cuda/softmax_xent.cu), LayerNorm's output in bf16 only. The host
// kernels are checked against their f32 forms on the widened values
// (tests/nn/bf16_logits_gradient_test.cpp, tests/ops/gemm_epilogue_test.cpp's neighbours). Runs on
// a GPU and under the CPU emulator (LOCKSTEP_CUDA=EMULATED).
#include <gtest/gtest.h>

#include <vector>

#include "ops/bias.h"
#include "ops/elementwise.h"
#include "ops/layernorm.h"
#include "ops/softmax_xent.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class CudaBf16InputTest : public CudaVsHostTest {};

TEST_F(CudaBf16InputTest, BiasGradSumsABf16Gradient) {
  const int64_t rows = 600, cols = 70;  // three row tiles, a partial column tile
  const Pair dy = bf16(random_vector(rows * cols, 1), {rows, cols});
  const Pair dbias = empty({cols}), accumulated = upload(random_vector(cols, 2), {cols});
  run_both([&](Stream& s, auto side) {
    bias_grad(side(dy), side(dbias), false, s);
    bias_grad(side(dy), side(accumulated), true, s);
  });
  expect_close(dbias, 1e-5, 1e-5);
  expect_close(accumulated, 1e-5, 1e-5);
}

TEST_F(CudaBf16InputTest, SoftmaxXentOfBf16LogitsWritesTheGradientOverThem) {
  const int64_t rows = 9, cols = 1000;
  std::vector<int32_t> labels;
  for (int64_t r = 0; r < rows; ++r) labels.push_back(static_cast<int32_t>((r * 97) % cols));
  labels[3] = kIgnoreLabel;
  const Pair y = upload_i32(labels, {rows});
  const Pair logits = bf16(random_vector(rows * cols, 3, -6, 6), {rows, cols});
  const Pair separate_logits = bf16(random_vector(rows * cols, 3, -6, 6), {rows, cols});
  const Pair loss = empty({1}), loss_only = empty({1}), loss_separate = empty({1});
  const Pair dlogits = empty({rows, cols}, DType::kBF16);
  run_both([&](Stream& s, auto side) {
    softmax_xent(side(logits), side(y), side(loss_only), Tensor(), 0.5f, s);
    softmax_xent(side(separate_logits), side(y), side(loss_separate), side(dlogits), 0.5f, s);
    softmax_xent(side(logits), side(y), side(loss), side(logits), 0.5f, s);  // in place
  });
  expect_close(loss, 1e-5, 1e-6);
  EXPECT_TRUE(bitwise_equal(cuda_values(loss), cuda_values(loss_only)));
  EXPECT_TRUE(bitwise_equal(cuda_values(loss), cuda_values(loss_separate)));
  // The in-place gradient is the separate one, bit for bit, and the host's within a bf16 step.
  EXPECT_TRUE(bitwise_equal(cuda_values(f32_of(logits)), cuda_values(f32_of(dlogits))));
  expect_close(f32_of(logits), 1.0 / 128, 1e-6);
}

// LayerNorm writing its output in bf16 only (no f32 y): the host's bits within a bf16 step, for
// both the float4 path (768 columns) and the scalar one (an odd width).
TEST_F(CudaBf16InputTest, LayerNormWritesItsOutputInBf16Only) {
  for (int64_t cols : {768, 37}) {
    const int64_t rows = 19;
    const Pair x = upload(random_vector(rows * cols, 5, -3, 3), {rows, cols});
    const Pair gamma = upload(random_vector(cols, 6), {cols}),
               beta = upload(random_vector(cols, 7), {cols});
    const Pair y16 = empty({rows, cols}, DType::kBF16), mean = empty({rows}), rstd = empty({rows});
    run_both([&](Stream& s, auto side) {
      layernorm(side(x), side(gamma), side(beta), 1e-5f, Tensor(), side(mean), side(rstd), s,
                side(y16));
    });
    expect_close(f32_of(y16), 1.0 / 128, 1e-3);
    expect_close(mean, 1e-5, 1e-6);
    expect_close(rstd, 1e-5, 1e-6);
  }
}

TEST_F(CudaBf16InputTest, Bf16LogitsTakeABf16GradientOnly) {
  const Pair logits = bf16(random_vector(4 * 8, 4), {4, 8});
  const Pair y = upload_i32({0, 1, 2, 3}, {4});
  const Pair loss = empty({1}), dlogits32 = empty({4, 8});
  EXPECT_THROW(softmax_xent(logits.cuda, y.cuda, loss.cuda, dlogits32.cuda, 1.0f, *cuda_), Error);
}

}  // namespace
}  // namespace ls::test
