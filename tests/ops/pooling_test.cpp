// pool in every mode against a double-precision reference on right-, left- and fully padded rows
// and masks with holes (x as [B, T, C] and [B*T, C]); pool_backward against central differences,
// overwriting and accumulating; token_mask; argument errors.
#include "ops/pooling.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

constexpr int64_t kB = 5, kT = 6, kC = 4;

// Row 0 all real, row 1 right-padded, row 2 left-padded, row 3 all padding, row 4 with holes.
std::vector<int32_t> mask() {
  return {1, 1, 1, 1, 1, 1,  //
          1, 1, 1, 0, 0, 0,  //
          0, 0, 1, 1, 1, 1,  //
          0, 0, 0, 0, 0, 0,  //
          0, 1, 0, 1, 1, 0};
}

std::vector<double> reference_pool(const std::vector<float>& x, const std::vector<int32_t>& valid,
                                   Pooling mode) {
  std::vector<double> y(static_cast<size_t>(kB * kC), 0.0);
  for (int64_t b = 0; b < kB; ++b) {
    std::vector<int64_t> real;
    for (int64_t t = 0; t < kT; ++t) {
      if (valid[b * kT + t] != 0) real.push_back(t);
    }
    if (real.empty()) continue;
    for (int64_t c = 0; c < kC; ++c) {
      double v = 0.0;
      if (mode == Pooling::kMean) {
        for (int64_t t : real) v += x[(b * kT + t) * kC + c];
        v /= static_cast<double>(real.size());
      } else {
        v = x[(b * kT + (mode == Pooling::kLast ? real.back() : real.front())) * kC + c];
      }
      y[b * kC + c] = v;
    }
  }
  return y;
}

class PoolingTest : public OpTestBase {};

const Pooling kModes[] = {Pooling::kLast, Pooling::kFirst, Pooling::kMean};

TEST_F(PoolingTest, PoolMatchesReference) {
  const auto x = random_vector(static_cast<size_t>(kB * kT * kC), 1);
  Tensor valid = upload_i32(mask(), {kB, kT});
  for (Pooling mode : kModes) {
    SCOPED_TRACE(pooling_name(mode));
    const auto want = reference_pool(x, mask(), mode);
    Tensor y = upload(std::vector<float>(kB * kC, std::nanf("")), {kB, kC});
    pool(upload(x, {kB, kT, kC}), valid, mode, y, *stream_);
    EXPECT_TRUE(all_close(download(y), want, 1e-6, 0));
    Tensor y2 = Tensor::empty({kB, kC}, DType::kF32, dev_);
    pool(upload(x, {kB * kT, kC}), valid, mode, y2, *stream_);
    EXPECT_TRUE(bitwise_equal(download(y2), download(y)));
  }
  // kLast takes the last REAL token: row 1's is t = 2, not t = 5.
  Tensor y = Tensor::empty({kB, kC}, DType::kF32, dev_);
  pool(upload(x, {kB, kT, kC}), valid, Pooling::kLast, y, *stream_);
  EXPECT_EQ(download(y)[1 * kC], x[(1 * kT + 2) * kC]);
}

TEST_F(PoolingTest, BackwardMatchesFiniteDifferences) {
  const auto x = random_vector(static_cast<size_t>(kB * kT * kC), 2);
  const auto w = random_vector(static_cast<size_t>(kB * kC), 3);
  Tensor valid = upload_i32(mask(), {kB, kT});
  for (Pooling mode : kModes) {
    SCOPED_TRACE(pooling_name(mode));
    Tensor y = Tensor::empty({kB, kC}, DType::kF32, dev_);
    auto loss_of = [&](const std::vector<float>& xv) {
      pool(upload(xv, {kB, kT, kC}), valid, mode, y, *stream_);
      return dot(download(y), w);
    };
    const auto fd = fd_gradient(loss_of, x, 1e-2f);
    Tensor dx = upload(std::vector<float>(x.size(), std::nanf("")), {kB, kT, kC});
    pool_backward(upload(w, {kB, kC}), valid, mode, dx, false, *stream_);
    const auto got = download(dx);
    EXPECT_TRUE(all_close(got, fd, 1e-3, 1e-4));
    // accumulate adds the same gradient on top.
    pool_backward(upload(w, {kB, kC}), valid, mode, dx, true, *stream_);
    std::vector<double> twice(got.size());
    for (size_t i = 0; i < got.size(); ++i) twice[i] = 2.0 * got[i];
    EXPECT_TRUE(all_close(download(dx), twice, 0, 0));
  }
}

TEST_F(PoolingTest, TokenMaskMarksEveryTokenButPadding) {
  Tensor valid = Tensor::empty({2, 3}, DType::kI32, dev_);
  token_mask(upload_i32({5, 0, 7, 0, 0, 1}, {2, 3}), 0, valid, *stream_);
  EXPECT_EQ(valid.to_host_i32(*stream_), (std::vector<int32_t>{1, 0, 1, 0, 0, 1}));
  Tensor tokens = upload_i32({3, -1, 3}, {3});
  token_mask(tokens, 3, tokens, *stream_);  // in place
  EXPECT_EQ(tokens.to_host_i32(*stream_), (std::vector<int32_t>{0, 1, 0}));
}

TEST_F(PoolingTest, ArgumentErrors) {
  Tensor x = Tensor::empty({kB, kT, kC}, DType::kF32, dev_);
  Tensor valid = upload_i32(mask(), {kB, kT});
  Tensor y = Tensor::empty({kB, kC}, DType::kF32, dev_);
  std::string msg = error_of([&] {
    pool(Tensor::empty({kB, kT + 1, kC}, DType::kF32, dev_), valid, Pooling::kMean, y, *stream_);
  });
  EXPECT_TRUE(contains(msg, "pool: x is f32[5, 7, 4]"));
  EXPECT_TRUE(contains(msg, "expected [5, 6, 4] or [30, 4]"));
  msg = error_of([&] { pool(x, valid.reshape({kB * kT}), Pooling::kLast, y, *stream_); });
  EXPECT_TRUE(contains(msg, "pool: valid is i32[30] on host:0; expected a 2-D [batch, T] mask"));
  msg = error_of([&] {
    pool(x, valid, Pooling::kLast, Tensor::empty({kB + 1, kC}, DType::kF32, dev_), *stream_);
  });
  EXPECT_TRUE(contains(msg, "pool: y is f32[6, 4] on host:0; expected [5, C]"));
  msg = error_of([&] {
    pool(x, upload(std::vector<float>(kB * kT), {kB, kT}), Pooling::kLast, y, *stream_);
  });
  EXPECT_TRUE(contains(msg, "pool: valid is f32[5, 6]"));
  msg = error_of([&] {
    pool_backward(y, valid, Pooling::kMean, Tensor::empty({kB, kC}, DType::kF32, dev_), false,
                  *stream_);
  });
  EXPECT_TRUE(contains(msg, "pool_backward: dx is f32[5, 4]"));
  msg = error_of([&] { pool(x, valid, Pooling::kFirst, x.view(0, {kB, kC}), *stream_); });
  EXPECT_TRUE(contains(msg, "pool: x and y overlap"));
  msg = error_of([&] { token_mask(valid, 0, Tensor::empty({kB}, DType::kI32, dev_), *stream_); });
  EXPECT_TRUE(contains(msg, "token_mask: valid is i32[5]"));
}

}  // namespace
}  // namespace ls::test
