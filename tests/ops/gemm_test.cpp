// matmul against a double-precision reference on odd and large shapes, every transpose pair and
// beta 0/1; a finite-difference check of the gradients matmul computes for both inputs; beta 0
// overwriting NaN; row-block results matching the whole product bitwise; argument errors.
#include "ops/gemm.h"

#include <gtest/gtest.h>

#include <limits>
#include <ostream>
#include <tuple>

#include "tests/ops/op_test_util.h"

namespace ls::test {
namespace {

struct GemmShape {
  int64_t m, k, n;
};
void PrintTo(const GemmShape& s, std::ostream* os) { *os << s.m << "x" << s.k << "x" << s.n; }

// Row-major index of op(X)[r][c] where op(X) is rows x cols and X is stored transposed if trans.
inline size_t op_index(bool trans, int64_t r, int64_t c, int64_t rows, int64_t cols) {
  return static_cast<size_t>(trans ? c * rows + r : r * cols + c);
}

// C = alpha op(A) op(B) + beta C in double; `bound` gets the error scale of each element,
// |alpha| sum |a||b| + |beta c|, against which f32 rounding is measured.
std::vector<double> reference_gemm(bool ta, bool tb, const GemmShape& s, float alpha,
                                   const std::vector<float>& a, const std::vector<float>& b,
                                   float beta, const std::vector<float>& c,
                                   std::vector<double>& bound) {
  std::vector<double> out(static_cast<size_t>(s.m * s.n));
  bound.assign(out.size(), 0.0);
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double sum = 0.0, mag = 0.0;
      for (int64_t p = 0; p < s.k; ++p) {
        const double prod = static_cast<double>(a[op_index(ta, i, p, s.m, s.k)]) *
                            b[op_index(tb, p, j, s.k, s.n)];
        sum += prod;
        mag += std::abs(prod);
      }
      const size_t ij = static_cast<size_t>(i * s.n + j);
      const double old = beta == 0.0f ? 0.0 : static_cast<double>(beta) * c[ij];
      out[ij] = alpha * sum + old;
      bound[ij] = std::abs(alpha) * mag + std::abs(old);
    }
  }
  return out;
}

Shape stored_shape(bool trans, int64_t rows, int64_t cols) {
  return trans ? Shape{cols, rows} : Shape{rows, cols};
}

class GemmTest : public OpTestBase,
                 public ::testing::WithParamInterface<std::tuple<GemmShape, bool, bool, float>> {
};

TEST_P(GemmTest, MatchesReference) {
  const auto [s, ta, tb, beta] = GetParam();
  const float alpha = 0.75f;
  const auto a = random_vector(static_cast<size_t>(s.m * s.k), 1);
  const auto b = random_vector(static_cast<size_t>(s.k * s.n), 2);
  const auto c = random_vector(static_cast<size_t>(s.m * s.n), 3);
  Tensor ta_t = upload(a, stored_shape(ta, s.m, s.k));
  Tensor tb_t = upload(b, stored_shape(tb, s.k, s.n));
  Tensor tc_t = upload(c, {s.m, s.n});
  matmul(ta_t, ta, tb_t, tb, tc_t, alpha, beta, *stream_);
  const auto got = download(tc_t);

  std::vector<double> bound;
  const auto want = reference_gemm(ta, tb, s, alpha, a, b, beta, c, bound);
  for (size_t i = 0; i < got.size(); ++i) {
    // f32 accumulation error grows at most ~k * 2^-24 times the sum of magnitudes.
    const double tol = (static_cast<double>(s.k) + 2.0) * 1.2e-7 * bound[i] + 1e-30;
    ASSERT_LE(std::abs(got[i] - want[i]), tol) << "element " << i << " of " << s.m << "x" << s.k
                                               << "x" << s.n << " ta=" << ta << " tb=" << tb;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, GemmTest,
    ::testing::Combine(::testing::Values(GemmShape{1, 1, 1}, GemmShape{3, 5, 7},
                                         GemmShape{17, 33, 9}, GemmShape{128, 784, 256},
                                         GemmShape{1, 64, 1}, GemmShape{65, 1, 3}),
                       ::testing::Bool(), ::testing::Bool(), ::testing::Values(0.0f, 1.0f)));

class GemmOpTest : public OpTestBase {};

TEST_F(GemmOpTest, BetaZeroOverwritesNan) {
  Tensor a = upload({1, 2, 3, 4}, {2, 2});
  Tensor b = upload({1, 0, 0, 1}, {2, 2});
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor c = upload({nan, nan, nan, nan}, {2, 2});
  matmul(a, false, b, false, c, 1.0f, 0.0f, *stream_);
  EXPECT_EQ(download(c), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(GemmOpTest, AlphaZeroScalesC) {
  Tensor a = upload({1, 2, 3, 4}, {2, 2});
  Tensor c = upload({1, 2, 3, 4}, {2, 2});
  Tensor b = upload({5, 6, 7, 8}, {2, 2});
  matmul(a, false, b, true, c, 0.0f, 2.0f, *stream_);
  EXPECT_EQ(download(c), (std::vector<float>{2, 4, 6, 8}));
}

// L = sum(W . (A B)); dL/dA = W B^T and dL/dB = A^T W, both computed with matmul's transposes.
TEST_F(GemmOpTest, GradientsMatchFiniteDifferences) {
  const int64_t m = 3, k = 5, n = 4;
  const auto a = random_vector(m * k, 11);
  const auto b = random_vector(k * n, 12);
  const auto w = random_vector(m * n, 13);
  Tensor tw = upload(w, {m, n});
  auto loss = [&](const std::vector<float>& av, const std::vector<float>& bv) {
    Tensor c = Tensor::empty({m, n}, DType::kF32, dev_);
    matmul(upload(av, {m, k}), false, upload(bv, {k, n}), false, c, 1.0f, 0.0f, *stream_);
    return dot(download(c), w);
  };
  Tensor da = Tensor::empty({m, k}, DType::kF32, dev_);
  Tensor db = Tensor::empty({k, n}, DType::kF32, dev_);
  matmul(tw, false, upload(b, {k, n}), true, da, 1.0f, 0.0f, *stream_);
  matmul(upload(a, {m, k}), true, tw, false, db, 1.0f, 0.0f, *stream_);

  const auto fd_a = fd_gradient([&](const std::vector<float>& x) { return loss(x, b); }, a, 1e-2f);
  const auto fd_b = fd_gradient([&](const std::vector<float>& x) { return loss(a, x); }, b, 1e-2f);
  EXPECT_TRUE(all_close(download(da), fd_a, 1e-2, 1e-3));
  EXPECT_TRUE(all_close(download(db), fd_b, 1e-2, 1e-3));
}

// Host GEMMs split rows of C across cores; a block of rows computed alone must equal the same
// rows of the whole product bitwise, or results would depend on the core count.
TEST_F(GemmOpTest, RowBlocksMatchWholeProductBitwise) {
  const int64_t m = 96, k = 300, n = 70;
  const auto a = random_vector(m * k, 21);
  const auto b = random_vector(k * n, 22);
  for (bool ta : {false, true}) {
    Tensor tb = upload(b, {k, n});
    Tensor whole = Tensor::empty({m, n}, DType::kF32, dev_);
    Tensor ta_t = upload(a, stored_shape(ta, m, k));
    matmul(ta_t, ta, tb, false, whole, 1.0f, 0.0f, *stream_);
    const auto want = download(whole);
    std::vector<float> got;
    for (int64_t r0 = 0; r0 < m; r0 += 32) {
      std::vector<float> a_block;  // rows r0..r0+32 of op(A), stored like A
      for (int64_t i = r0; i < r0 + 32; ++i) {
        for (int64_t p = 0; p < k; ++p) a_block.push_back(a[op_index(ta, i, p, m, k)]);
      }
      Tensor part = Tensor::empty({32, n}, DType::kF32, dev_);
      matmul(upload(a_block, {32, k}), false, tb, false, part, 1.0f, 0.0f, *stream_);
      const auto rows = download(part);
      got.insert(got.end(), rows.begin(), rows.end());
    }
    EXPECT_TRUE(bitwise_equal(got, want)) << "ta=" << ta;
  }
}

TEST_F(GemmOpTest, ArgumentErrorsNameTheProblem) {
  Tensor a = upload(random_vector(128 * 784, 1), {128, 784});
  Tensor w = upload(random_vector(10 * 784, 2), {10, 784});
  Tensor c = Tensor::empty({128, 10}, DType::kF32, dev_);

  EXPECT_THROW(matmul(a, false, w, false, c, 1, 0, *stream_), Error);
  std::string msg = error_of([&] { matmul(a, false, w, false, c, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul: inner dimensions differ"));
  EXPECT_TRUE(contains(msg, "f32[128, 784]"));
  EXPECT_TRUE(contains(msg, "f32[10, 784]"));
  EXPECT_TRUE(contains(msg, "pass trans_b=true?"));

  Tensor bad_c = Tensor::empty({128, 11}, DType::kF32, dev_);
  msg = error_of([&] { matmul(a, false, w, true, bad_c, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul: c is f32[128, 11]"));
  EXPECT_TRUE(contains(msg, "expected [128, 10]"));

  Tensor labels = upload_i32({1, 2}, {2});
  msg = error_of([&] { matmul(labels, false, w, true, c, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul: a is i32[2]"));
  EXPECT_TRUE(contains(msg, "2-D f32"));

  msg = error_of([&] { matmul(Tensor(), false, w, true, c, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "matmul: a is an undefined Tensor"));

  Tensor sq = upload({1, 2, 3, 4}, {2, 2});
  msg = error_of([&] { matmul(sq, false, sq, false, sq, 1, 0, *stream_); });
  EXPECT_TRUE(contains(msg, "overlaps an input"));
}

}  // namespace
}  // namespace ls::test
