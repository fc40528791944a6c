// dropout: the fraction dropped is ~p and kept values are x / (1 - p); the mask is a pure
// function of (key, global row, position) — the same for one call over rows [0, 8) as for calls
// over [0, 3) and [3, 8) with first_row 3, the same on every run, different for another key —
// p = 0 is the identity, accumulate adds, the backward uses the forward's mask; dropout_key; and
// argument errors.
#include "ops/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "ops/host/host_ops.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

class DropoutTest : public OpTestBase {
 protected:
  std::vector<float> run(const std::vector<float>& x, int64_t row_len, int64_t first_row, float p,
                         uint64_t key) {
    const auto n = static_cast<int64_t>(x.size());
    Tensor y = Tensor::empty({n}, DType::kF32, dev_);
    dropout(upload(x, {n}), y, row_len, first_row, p, key, false, *stream_);
    return download(y);
  }
};

TEST_F(DropoutTest, DropsAboutPAndScalesTheRest) {
  const int64_t n = 200000, row_len = 1000;
  const auto x = random_vector(n, 1, 0.5f, 1.5f);  // never 0: a 0 output means dropped
  for (float p : {0.1f, 0.3f, 0.5f, 0.9f}) {
    const auto y = run(x, row_len, 0, p, dropout_key(1, 0, 0));
    const float scale = 1.0f / (1.0f - p);
    int64_t dropped = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool keep = dropout_uniform(dropout_key(1, 0, 0), i / row_len, i % row_len) >= p;
      ASSERT_EQ(y[i], keep ? x[i] * scale : 0.0f) << "element " << i << " p=" << p;
      dropped += y[i] == 0.0f ? 1 : 0;
    }
    // Binomial: standard deviation sqrt(p (1 - p) / n) < 0.0012.
    EXPECT_NEAR(static_cast<double>(dropped) / n, p, 0.006) << "p=" << p;
  }
}

TEST_F(DropoutTest, MaskIsThePerElementFunctionOfKeyRowAndPosition) {
  const int64_t row_len = 37;
  const auto x = random_vector(8 * row_len, 2, 0.5f, 1.5f);
  const uint64_t key = dropout_key(42, 7, 3);
  const auto whole = run(x, row_len, 0, 0.4f, key);
  EXPECT_TRUE(bitwise_equal(run(x, row_len, 0, 0.4f, key), whole));  // repeatable
  // Rows [0, 3) and [3, 8) as two calls (two replicas' shares of a batch).
  const std::vector<float> head(x.begin(), x.begin() + 3 * row_len);
  const std::vector<float> tail(x.begin() + 3 * row_len, x.end());
  std::vector<float> split = run(head, row_len, 0, 0.4f, key);
  const auto rest = run(tail, row_len, 3, 0.4f, key);
  split.insert(split.end(), rest.begin(), rest.end());
  EXPECT_TRUE(bitwise_equal(split, whole));
  // A batch past the host grain, one call vs one call per row.
  const int64_t rows = 2 * kHostGrain / row_len + 5;
  const auto big = random_vector(rows * row_len, 3, 0.5f, 1.5f);
  const auto big_whole = run(big, row_len, 100, 0.25f, key);
  std::vector<float> by_row;
  for (int64_t r = 0; r < rows; ++r) {
    const auto part =
        run(std::vector<float>(big.begin() + r * row_len, big.begin() + (r + 1) * row_len), row_len,
            100 + r, 0.25f, key);
    by_row.insert(by_row.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(bitwise_equal(by_row, big_whole));
  // Another key (another step or site) drops other elements.
  EXPECT_FALSE(bitwise_equal(run(x, row_len, 0, 0.4f, dropout_key(42, 8, 3)), whole));
  EXPECT_FALSE(bitwise_equal(run(x, row_len, 0, 0.4f, dropout_key(42, 7, 4)), whole));
}

TEST_F(DropoutTest, ZeroPIsTheIdentityAndAccumulateAdds) {
  const int64_t n = 1000;
  const auto x = random_vector(n, 4), y0 = random_vector(n, 5);
  EXPECT_TRUE(bitwise_equal(run(x, 10, 0, 0.0f, 99), x));
  Tensor y = upload(y0, {n});
  dropout(upload(x, {n}), y, 10, 0, 0.5f, 99, true, *stream_);
  const auto fresh = run(x, 10, 0, 0.5f, 99);
  std::vector<double> want(n);
  for (int64_t i = 0; i < n; ++i) want[i] = static_cast<float>(y0[i] + fresh[i]);
  EXPECT_TRUE(all_close(download(y), want, 0, 0));
  Tensor inplace = upload(x, {n});  // y = x
  dropout(inplace, inplace, 10, 0, 0.5f, 99, false, *stream_);
  EXPECT_TRUE(bitwise_equal(download(inplace), fresh));
}

// Backward = the same call on dy: dx = dy * mask / (1 - p), which is the derivative of the
// forward (checked against central differences, the mask being constant in x).
TEST_F(DropoutTest, BackwardUsesTheForwardMask) {
  const int64_t n = 60, row_len = 12;
  const float p = 0.3f;
  const uint64_t key = dropout_key(5, 1, 2);
  const auto x = random_vector(n, 6), w = random_vector(n, 7);
  auto loss = [&](const std::vector<float>& xv) { return dot(run(xv, row_len, 4, p, key), w); };
  const auto dx = run(w, row_len, 4, p, key);
  EXPECT_TRUE(all_close(dx, fd_gradient(loss, x, 1e-2f), 1e-3, 1e-4));
  const auto y = run(x, row_len, 4, p, key);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(y[i] == 0.0f, dx[i] == 0.0f) << "element " << i;
}

TEST_F(DropoutTest, KeysDifferPerSeedStepAndSite) {
  std::set<uint64_t> keys;
  for (uint64_t seed : {0, 1, 2}) {
    for (int64_t step : {0, 1, 2, 1000}) {
      for (uint64_t site : {0, 1, 2, 3}) keys.insert(dropout_key(seed, step, site));
    }
  }
  EXPECT_EQ(keys.size(), 48u);
  EXPECT_EQ(dropout_key(3, 4, 5), dropout_key(3, 4, 5));
  EXPECT_EQ(dropout_threshold(0.0f), 0u);
  EXPECT_EQ(dropout_threshold(0.5f), 1u << 23);
  EXPECT_EQ(dropout_threshold(0.1f), static_cast<uint32_t>(std::ceil(0.1f * 16777216.0)));
}

TEST_F(DropoutTest, ArgumentErrors) {
  Tensor x = Tensor::empty({4, 6}, DType::kF32, dev_);
  std::string msg = error_of([&] { dropout(x, x, 6, 0, 1.0f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "dropout: p is 1"));
  EXPECT_TRUE(contains(msg, "[0, 1)"));
  msg = error_of([&] { dropout(x, x, 6, 0, -0.1f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "dropout: p is -0.1"));
  msg = error_of([&] { dropout(x, x, 5, 0, 0.1f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "dropout: row_len is 5"));
  EXPECT_TRUE(contains(msg, "divides its 24 elements"));
  msg = error_of([&] { dropout(x, x, 0, 0, 0.1f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "row_len is 0"));
  msg = error_of([&] { dropout(x, x, 6, -1, 0.1f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "dropout: first_row is -1"));
  msg = error_of(
      [&] { dropout(x, Tensor::empty({5}, DType::kF32, dev_), 6, 0, 0.1f, 0, false, *stream_); });
  EXPECT_TRUE(contains(msg, "dropout: y is f32[5]"));
}

}  // namespace
}  // namespace ls::test
