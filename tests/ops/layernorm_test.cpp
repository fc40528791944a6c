// layernorm and layernorm_backward against a double-precision reference (rows far from 0, a
// 3-D input, cols = 1), accumulate on and off, the gradients of x, gamma and beta against central
// differences, in-place use (y = x, dx = dy), bitwise repeatability and argument errors.
#include "ops/layernorm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct LnRef {
  std::vector<double> y, mean, rstd, dx, dgamma, dbeta;
};

// Forward and backward in double; dgamma/dbeta start at 0 (callers add their initial values).
LnRef reference_layernorm(const std::vector<float>& x, const std::vector<float>& gamma,
                          const std::vector<float>& beta, const std::vector<float>& dy,
                          int64_t rows, int64_t cols, double eps) {
  LnRef ref;
  ref.y.resize(x.size());
  ref.dx.resize(x.size());
  ref.mean.resize(rows);
  ref.rstd.resize(rows);
  ref.dgamma.assign(cols, 0.0);
  ref.dbeta.assign(cols, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += xr[c];
    mean /= cols;
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    const double rstd = 1.0 / std::sqrt(var / cols + eps);
    ref.mean[r] = mean;
    ref.rstd[r] = rstd;
    double mean_g = 0.0, mean_gx = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      const double g = static_cast<double>(dy[r * cols + c]) * gamma[c];
      ref.y[r * cols + c] = xhat * gamma[c] + beta[c];
      mean_g += g / cols;
      mean_gx += g * xhat / cols;
      ref.dgamma[c] += dy[r * cols + c] * xhat;
      ref.dbeta[c] += dy[r * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (xr[c] - mean) * rstd;
      const double g = static_cast<double>(dy[r * cols + c]) * gamma[c];
      ref.dx[r * cols + c] = rstd * (g - mean_g - xhat * mean_gx);
    }
  }
  return ref;
}

std::vector<double> plus(std::vector<double> a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

class LayerNormTest : public OpTestBase {};

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},   {1, 8},    {3, 7},
                                                          {17, 33}, {64, 768}, {5, 1000}};

TEST_F(LayerNormTest, MatchesReference) {
  const float eps = 1e-5f;
  for (auto [rows, cols] : kShapes) {
    SCOPED_TRACE(testing::Message() << rows << "x" << cols);
    auto x = random_vector(rows * cols, 1, -3, 3);
    for (int64_t i = 0; i < rows * cols; ++i) x[i] += 10.0f * static_cast<float>((i / cols) % 3);
    const auto gamma = random_vector(cols, 2, 0.5f, 1.5f), beta = random_vector(cols, 3);
    const auto dy = random_vector(rows * cols, 4);
    const auto dx0 = random_vector(rows * cols, 5), dgamma0 = random_vector(cols, 6);
    const auto dbeta0 = random_vector(cols, 7);
    const LnRef ref = reference_layernorm(x, gamma, beta, dy, rows, cols, eps);

    Tensor tx = upload(x, {rows, cols}), tgamma = upload(gamma, {cols});
    Tensor y = Tensor::empty({rows, cols}, DType::kF32, dev_);
    Tensor mean = Tensor::empty({rows}, DType::kF32, dev_);
    Tensor rstd = Tensor::empty({rows}, DType::kF32, dev_);
    layernorm(tx, tgamma, upload(beta, {cols}), eps, y, mean, rstd, *stream_);
    EXPECT_TRUE(all_close(download(y), ref.y, 1e-4, 1e-4));
    EXPECT_TRUE(all_close(download(mean), ref.mean, 1e-6, 1e-6));
    EXPECT_TRUE(all_close(download(rstd), ref.rstd, 1e-4, 0));
    for (bool accumulate : {false, true}) {
      Tensor dx = upload(dx0, {rows, cols});
      Tensor dgamma = upload(dgamma0, {cols}), dbeta = upload(dbeta0, {cols});
      layernorm_backward(tx, tgamma, mean, rstd, upload(dy, {rows, cols}), dx, accumulate, dgamma,
                         dbeta, *stream_);
      EXPECT_TRUE(all_close(download(dx), accumulate ? plus(ref.dx, dx0) : ref.dx, 1e-3, 1e-4))
          << "accumulate=" << accumulate;
      // dgamma, dbeta always accumulate.
      EXPECT_TRUE(all_close(download(dgamma), plus(ref.dgamma, dgamma0), 1e-4, 1e-4));
      EXPECT_TRUE(all_close(download(dbeta), plus(ref.dbeta, dbeta0), 1e-4, 1e-4));
    }
  }
}

TEST_F(LayerNormTest, NormalisesTheLastDimensionOfA3DTensor) {
  const int64_t cols = 6;
  const auto x = random_vector(2 * 3 * cols, 8), gamma = random_vector(cols, 9);
  const auto beta = random_vector(cols, 10);
  const LnRef ref = reference_layernorm(x, gamma, beta, x, 6, cols, 1e-5);
  Tensor y = Tensor::empty({2, 3, cols}, DType::kF32, dev_);
  Tensor mean = Tensor::empty({6}, DType::kF32, dev_), rstd = Tensor::empty({6}, DType::kF32, dev_);
  layernorm(upload(x, {2, 3, cols}), upload(gamma, {cols}), upload(beta, {cols}), 1e-5f, y, mean,
            rstd, *stream_);
  EXPECT_TRUE(all_close(download(y), ref.y, 1e-4, 1e-5));
}

// L = sum(w . layernorm(x; gamma, beta)): gradients of x, gamma, beta vs central differences.
TEST_F(LayerNormTest, GradientsMatchFiniteDifferences) {
  const int64_t rows = 3, cols = 5;
  const float eps = 1e-5f;
  const auto x = random_vector(rows * cols, 11, -2, 2);
  const auto gamma = random_vector(cols, 12, 0.5f, 1.5f), beta = random_vector(cols, 13);
  const auto w = random_vector(rows * cols, 14);
  Tensor y = Tensor::empty({rows, cols}, DType::kF32, dev_);
  Tensor mean = Tensor::empty({rows}, DType::kF32, dev_);
  Tensor rstd = Tensor::empty({rows}, DType::kF32, dev_);
  auto loss = [&](const std::vector<float>& xv, const std::vector<float>& gv,
                  const std::vector<float>& bv) {
    layernorm(upload(xv, {rows, cols}), upload(gv, {cols}), upload(bv, {cols}), eps, y, mean, rstd,
              *stream_);
    return dot(download(y), w);
  };
  Tensor tx = upload(x, {rows, cols}), tgamma = upload(gamma, {cols});
  layernorm(tx, tgamma, upload(beta, {cols}), eps, y, mean, rstd, *stream_);
  Tensor dx = Tensor::empty({rows, cols}, DType::kF32, dev_);
  Tensor dgamma = upload(std::vector<float>(cols, 0.0f), {cols});
  Tensor dbeta = upload(std::vector<float>(cols, 0.0f), {cols});
  layernorm_backward(tx, tgamma, mean, rstd, upload(w, {rows, cols}), dx, false, dgamma, dbeta,
                     *stream_);
  const float h = 1e-2f;
  EXPECT_TRUE(all_close(download(dx),
                        fd_gradient([&](const auto& v) { return loss(v, gamma, beta); }, x, h),
                        2e-2, 2e-3));
  EXPECT_TRUE(all_close(download(dgamma),
                        fd_gradient([&](const auto& v) { return loss(x, v, beta); }, gamma, h),
                        1e-2, 1e-3));
  EXPECT_TRUE(all_close(download(dbeta),
                        fd_gradient([&](const auto& v) { return loss(x, gamma, v); }, beta, h),
                        1e-2, 1e-3));
}

// y = x and dx = dy give the out-of-place results bitwise; repeated calls repeat bitwise.
TEST_F(LayerNormTest, InPlaceAndRepeatable) {
  const int64_t rows = 2 * kHostGrain / 100 + 3, cols = 100;
  const auto x = random_vector(rows * cols, 15), dy = random_vector(rows * cols, 16);
  Tensor gamma = upload(random_vector(cols, 17), {cols}),
         beta = upload(random_vector(cols, 18), {cols});
  Tensor mean = Tensor::empty({rows}, DType::kF32, dev_);
  Tensor rstd = Tensor::empty({rows}, DType::kF32, dev_);
  Tensor tx = upload(x, {rows, cols});
  Tensor y = Tensor::empty({rows, cols}, DType::kF32, dev_);
  layernorm(tx, gamma, beta, 1e-5f, y, mean, rstd, *stream_);
  Tensor inplace = upload(x, {rows, cols});
  layernorm(inplace, gamma, beta, 1e-5f, inplace, mean, rstd, *stream_);
  EXPECT_TRUE(bitwise_equal(download(inplace), download(y)));

  std::vector<float> first_dx, first_dgamma;
  for (int run = 0; run < 2; ++run) {
    Tensor dx = upload(dy, {rows, cols});  // dx = dy, in place
    Tensor dgamma = upload(std::vector<float>(cols, 0.0f), {cols});
    Tensor dbeta = upload(std::vector<float>(cols, 0.0f), {cols});
    Tensor separate = Tensor::empty({rows, cols}, DType::kF32, dev_);
    Tensor dgamma2 = upload(std::vector<float>(cols, 0.0f), {cols});
    layernorm_backward(tx, gamma, mean, rstd, upload(dy, {rows, cols}), separate, false, dgamma2,
                       dbeta, *stream_);
    layernorm_backward(tx, gamma, mean, rstd, dx, dx, false, dgamma, dbeta, *stream_);
    EXPECT_TRUE(bitwise_equal(download(dx), download(separate)));
    EXPECT_TRUE(bitwise_equal(download(dgamma), download(dgamma2)));
    if (run == 0) {
      first_dx = download(dx);
      first_dgamma = download(dgamma);
    } else {
      EXPECT_TRUE(bitwise_equal(download(dx), first_dx));
      EXPECT_TRUE(bitwise_equal(download(dgamma), first_dgamma));
    }
  }
}

TEST_F(LayerNormTest, ArgumentErrors) {
  Tensor x = Tensor::empty({4, 3}, DType::kF32, dev_);
  Tensor v3 = Tensor::empty({3}, DType::kF32, dev_), v4 = Tensor::empty({4}, DType::kF32, dev_);
  std::string msg =
      error_of([&] { layernorm(x.reshape({12}), v3, v3, 1e-5f, x, v4, v4, *stream_); });
  EXPECT_TRUE(contains(msg, "layernorm: x is f32[12]"));
  EXPECT_TRUE(contains(msg, "reshape it to [-1, features]"));
  msg = error_of([&] { layernorm(x, v4, v3, 1e-5f, x, v4, v4, *stream_); });
  EXPECT_TRUE(contains(msg, "layernorm: gamma is f32[4]"));
  EXPECT_TRUE(contains(msg, "expected [3], one value per column"));
  msg = error_of([&] { layernorm(x, v3, v3, 1e-5f, x, v3, v4, *stream_); });
  EXPECT_TRUE(contains(msg, "mean is f32[3]"));
  EXPECT_TRUE(contains(msg, "expected [4], one value per row"));
  msg = error_of([&] { layernorm(x, v3, v3, 0.0f, x, v4, v4, *stream_); });
  EXPECT_TRUE(contains(msg, "layernorm: eps is 0"));
  msg = error_of([&] {
    layernorm(x, v3, v3, 1e-5f, Tensor::empty({3, 4}, DType::kF32, dev_), v4, v4, *stream_);
  });
  EXPECT_TRUE(contains(msg, "y is f32[3, 4]"));
  msg = error_of([&] { layernorm_backward(x, v3, v4, v4, x, x, false, v3, v4, *stream_); });
  EXPECT_TRUE(contains(msg, "layernorm_backward: dbeta is f32[4]"));
  msg = error_of([&] {
    layernorm_backward(x, v3, v4, v4, Tensor::empty({4, 3}, DType::kI32, dev_), x, false, v3, v3,
                       *stream_);
  });
  EXPECT_TRUE(contains(msg, "layernorm_backward: dy is i32[4, 3]"));
}

}  // namespace
}  // namespace ls::test
