// The squared-error and BCE-with-logits kernels (ops/pointwise_loss.h) against plain double
// loops: the sum (over several summation blocks), the gradient with a device seed, accumulation,
// repeatability, shape errors; and the CUDA kernels against the host's (skipped without a GPU;
// run under the CPU emulator in CI).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/pointwise_loss.h"
#include "tests/ops/cuda_op_test_util.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

double reference_loss(PointwiseLoss kind, double p, double t) {
  if (kind == PointwiseLoss::kSquaredError) return (p - t) * (p - t);
  return std::max(p, 0.0) - p * t + std::log1p(std::exp(-std::abs(p)));
}

double reference_derivative(PointwiseLoss kind, double p, double t) {
  if (kind == PointwiseLoss::kSquaredError) return 2 * (p - t);
  return 1 / (1 + std::exp(-p)) - t;
}

class PointwiseLossTest : public OpTestBase,
                          public ::testing::WithParamInterface<PointwiseLoss> {};

TEST_P(PointwiseLossTest, SumAndGradientMatchTheDefinition) {
  const PointwiseLoss kind = GetParam();
  // 3 summation blocks and a partial one; logits up to +-30 (BCE's stable form matters there).
  const int64_t n = 3 * kPointwiseLossBlock + 123;
  const std::vector<float> pred = random_vector(n, 1, -30.0f, 30.0f);
  const std::vector<float> target = random_vector(n, 2, 0.0f, 1.0f);
  Tensor p = upload(pred, {n}), t = upload(target, {n});
  Tensor sum = Tensor::empty({1}, DType::kF32, dev_);
  Tensor seed = upload({0.25f}, {1});
  Tensor grad = upload(std::vector<float>(n, 1.0f), {n});
  pointwise_loss_sum(kind, p, t, sum, *stream_);
  pointwise_loss_backward(kind, p, t, seed, grad, /*accumulate=*/true, *stream_);
  double expected = 0;
  std::vector<double> expected_grad(n);
  for (int64_t i = 0; i < n; ++i) {
    expected += reference_loss(kind, pred[i], target[i]);
    expected_grad[i] = 1.0 + 0.25 * reference_derivative(kind, pred[i], target[i]);
  }
  EXPECT_NEAR(download(sum)[0], expected, 1e-6 * std::abs(expected));
  EXPECT_TRUE(all_close(download(grad), expected_grad, 1e-5, 1e-6));
  // Overwriting instead of accumulating; the sum again, bitwise.
  pointwise_loss_backward(kind, p, t, seed, grad, /*accumulate=*/false, *stream_);
  for (double& g : expected_grad) g -= 1.0;
  EXPECT_TRUE(all_close(download(grad), expected_grad, 1e-5, 1e-6));
  Tensor again = Tensor::empty({1}, DType::kF32, dev_);
  pointwise_loss_sum(kind, p, t, again, *stream_);
  EXPECT_TRUE(bitwise_equal(download(again), download(sum)));
}

TEST_P(PointwiseLossTest, NoElementsSumToZeroAndBadShapesAreNamed) {
  const PointwiseLoss kind = GetParam();
  Tensor sum = upload({7.0f}, {1});
  Tensor none = Tensor::empty({0}, DType::kF32, dev_);
  pointwise_loss_sum(kind, none, none, sum, *stream_);
  EXPECT_EQ(download(sum)[0], 0.0f);
  Tensor p = upload(random_vector(6, 1), {2, 3}), t = upload(random_vector(6, 2), {3, 2});
  EXPECT_TRUE(contains(error_of([&] { pointwise_loss_sum(kind, p, t, sum, *stream_); }),
                       "expected the shape of the prediction"));
}

INSTANTIATE_TEST_SUITE_P(Kinds, PointwiseLossTest,
                         ::testing::Values(PointwiseLoss::kSquaredError,
                                           PointwiseLoss::kBceWithLogits),
                         [](const auto& info) {
                           return std::string(pointwise_loss_name(info.param));
                         });

// CUDA against host (skipped without a GPU; the emulator ctest and gpu-check run this suite).
class CudaPointwiseLossTest : public CudaVsHostTest {};

TEST_F(CudaPointwiseLossTest, SumAndGradientMatchHostAndRepeat) {
  for (PointwiseLoss kind : {PointwiseLoss::kSquaredError, PointwiseLoss::kBceWithLogits}) {
    for (int64_t n : {int64_t{1}, int64_t{1000}, 2 * kPointwiseLossBlock + 17}) {
      SCOPED_TRACE(testing::Message() << pointwise_loss_name(kind) << " n=" << n);
      Pair p = upload(random_vector(n, 1, -20.0f, 20.0f), {n});
      Pair t = upload(random_vector(n, 2, 0.0f, 1.0f), {n});
      Pair seed = upload({0.5f}, {1});
      Pair sum = empty({1}), grad = upload(random_vector(n, 3), {n});
      run_both([&](Stream& s, auto side) {
        pointwise_loss_sum(kind, side(p), side(t), side(sum), s);
        pointwise_loss_backward(kind, side(p), side(t), side(seed), side(grad), true, s);
      });
      expect_close(sum, 1e-6, 1e-6);
      expect_close(grad);
      const std::vector<float> first = cuda_values(sum);
      pointwise_loss_sum(kind, p.cuda, t.cuda, sum.cuda, *cuda_);
      EXPECT_TRUE(bitwise_equal(cuda_values(sum), first));
    }
  }
}

}  // namespace
}  // namespace ls::test
