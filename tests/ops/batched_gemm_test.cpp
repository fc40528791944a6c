// matmul_batched against a double-precision reference for every transpose pair, beta 0 (NaN in
// c overwritten) and 1, batches of 1 and several; each batch equal bitwise to matmul on that
// matrix; k == 0 and batch == 0; argument errors.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/gemm.h"
#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct Dims {
  int64_t batch, m, k, n;
};

Shape stored(int64_t batch, bool trans, int64_t rows, int64_t cols) {
  return trans ? Shape{batch, cols, rows} : Shape{batch, rows, cols};
}

class BatchedGemmTest : public OpTestBase {};

TEST_F(BatchedGemmTest, MatchesReference) {
  const std::vector<Dims> cases = {{1, 3, 4, 5}, {4, 5, 3, 2}, {7, 1, 9, 6}, {3, 17, 8, 33}};
  const float alpha = 0.75f;
  for (const Dims& s : cases) {
    for (int t = 0; t < 4; ++t) {
      for (float beta : {0.0f, 1.0f}) {
        const bool ta = t & 1, tb = t & 2;
        SCOPED_TRACE(testing::Message() << s.batch << "x" << s.m << "x" << s.k << "x" << s.n
                                        << " ta=" << ta << " tb=" << tb << " beta=" << beta);
        const auto a = random_vector(static_cast<size_t>(s.batch * s.m * s.k), 1);
        const auto b = random_vector(static_cast<size_t>(s.batch * s.k * s.n), 2);
        auto c = random_vector(static_cast<size_t>(s.batch * s.m * s.n), 3);
        if (beta == 0.0f) c[0] = std::nanf("");  // must be overwritten
        Tensor tc = upload(c, {s.batch, s.m, s.n});
        Tensor ta_t = upload(a, stored(s.batch, ta, s.m, s.k));
        Tensor tb_t = upload(b, stored(s.batch, tb, s.k, s.n));
        matmul_batched(ta_t, ta, tb_t, tb, tc, s.batch, alpha, beta, *stream_);
        const auto got = download(tc);

        std::vector<double> want(c.size());
        for (int64_t x = 0; x < s.batch; ++x)
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double sum = 0.0;
              for (int64_t p = 0; p < s.k; ++p) {
                const float av = a[x * s.m * s.k + (ta ? p * s.m + i : i * s.k + p)];
                const float bv = b[x * s.k * s.n + (tb ? j * s.k + p : p * s.n + j)];
                sum += static_cast<double>(av) * bv;
              }
              const size_t ij = static_cast<size_t>((x * s.m + i) * s.n + j);
              want[ij] = alpha * sum + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[ij]);
            }
        EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5));

        // Each product is the one matmul computes (small shapes: one CBLAS call each).
        Tensor one = Tensor::empty({s.m, s.n}, DType::kF32, dev_);
        for (int64_t x = 0; x < s.batch; ++x) {
          const Shape sa = ta ? Shape{s.k, s.m} : Shape{s.m, s.k};
          const Shape sb = tb ? Shape{s.n, s.k} : Shape{s.k, s.n};
          one.copy_from(upload(c, {s.batch * s.m * s.n}).view(x * s.m * s.n, {s.m, s.n}), *stream_);
          matmul(ta_t.view(x * s.m * s.k, sa), ta, tb_t.view(x * s.k * s.n, sb), tb, one, alpha,
                 beta, *stream_);
          const auto row = download(one);
          const std::vector<float> part(got.begin() + x * s.m * s.n,
                                        got.begin() + (x + 1) * s.m * s.n);
          EXPECT_TRUE(bitwise_equal(row, part)) << "batch " << x;
        }
      }
    }
  }
}

TEST_F(BatchedGemmTest, EmptyInnerDimensionAndEmptyBatch) {
  Tensor a = Tensor::empty({2, 3, 0}, DType::kF32, dev_);
  Tensor b = Tensor::empty({2, 0, 4}, DType::kF32, dev_);
  Tensor c = upload(random_vector(24, 4), {2, 3, 4});
  const auto before = download(c);
  matmul_batched(a, false, b, false, c, 2, 1.0f, 0.5f, *stream_);
  std::vector<double> half(before.size());
  for (size_t i = 0; i < before.size(); ++i) half[i] = 0.5 * before[i];
  EXPECT_TRUE(all_close(download(c), half, 0, 0));
  matmul_batched(Tensor::empty({0, 3, 2}, DType::kF32, dev_), false,
                 Tensor::empty({0, 2, 4}, DType::kF32, dev_), false,
                 Tensor::empty({0, 3, 4}, DType::kF32, dev_), 0, 1.0f, 0.0f, *stream_);
  stream_->synchronize();
}

TEST_F(BatchedGemmTest, ArgumentErrors) {
  Tensor a = Tensor::empty({4, 3, 5}, DType::kF32, dev_);
  Tensor b = Tensor::empty({4, 5, 2}, DType::kF32, dev_);
  Tensor c = Tensor::empty({4, 3, 2}, DType::kF32, dev_);
  std::string msg = error_of([&] {
    matmul_batched(a.reshape({12, 5}), false, b, false, c, 4, 1, 0, *stream_);
  });
  EXPECT_TRUE(contains(msg, "matmul_batched: a is f32[12, 5]"));
  EXPECT_TRUE(contains(msg, "3-D [batch, rows, cols]"));
  msg = error_of([&] { matmul_batched(a, false, b, false, c, 3, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul_batched: a is f32[4, 3, 5]"));
  EXPECT_TRUE(contains(msg, "batch = 3"));
  msg = error_of([&] { matmul_batched(a, false, b, true, c, 4, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul_batched: inner dimensions differ"));
  EXPECT_TRUE(contains(msg, "pass trans_b=false?"));
  msg = error_of([&] {
    matmul_batched(a, false, b, false, Tensor::empty({4, 2, 3}, DType::kF32, dev_), 4, 1, 0,
                   *stream_);
  });
  EXPECT_TRUE(contains(msg, "matmul_batched: c is f32[4, 2, 3]"));
  EXPECT_TRUE(contains(msg, "expected [4, 3, 2]"));
  Tensor sq = Tensor::empty({2, 3, 3}, DType::kF32, dev_);
  msg = error_of([&] { matmul_batched(sq, false, sq, false, sq, 2, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "overlaps an input"));
  msg = error_of([&] { matmul_batched(a, false, b, false, c, -1, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "batch = -1"));
}

}  // namespace
}  // namespace ls::test
