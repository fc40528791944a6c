// matmul against a double-precision reference on odd and large shapes, every transpose pair and
// beta 0/1; a finite-difference check of the gradients matmul computes for both inputs; beta 0
// overwriting NaN; row-block results matching the whole product bitwise; argument errors.
#include "ops/gemm.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <limits>
#include <ostream>
#include <tuple>

#include "engine/core/host/host_device.h"
#include "ops/bias.h"
#include "ops/host/host_ops.h"
#include "ops/softmax_xent.h"
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
        const double prod =
            static_cast<double>(a[op_index(ta, i, p, s.m, s.k)]) * b[op_index(tb, p, j, s.k, s.n)];
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
                 public ::testing::WithParamInterface<std::tuple<GemmShape, bool, bool, float>> {};

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

// Host GEMMs split the rows of C across cores. A block of rows computed alone matches the same
// rows of the whole product to rounding (OpenBLAS may pick another kernel for a smaller call, so
// not bitwise), and the same call repeated is bitwise identical.
TEST_F(GemmOpTest, RowBlocksMatchWholeProductAndRepeatsAreBitwise) {
  const int64_t m = 96, k = 300, n = 70, block = 32;
  const auto a = random_vector(m * k, 21);
  const auto b = random_vector(k * n, 22);
  for (bool ta : {false, true}) {
    Tensor tb = upload(b, {k, n});
    Tensor ta_t = upload(a, stored_shape(ta, m, k));
    Tensor whole = Tensor::empty({m, n}, DType::kF32, dev_);
    Tensor again = Tensor::empty({m, n}, DType::kF32, dev_);
    matmul(ta_t, ta, tb, false, whole, 1.0f, 0.0f, *stream_);
    matmul(ta_t, ta, tb, false, again, 1.0f, 0.0f, *stream_);
    const auto want = download(whole);
    EXPECT_TRUE(bitwise_equal(download(again), want)) << "ta=" << ta;

    std::vector<float> got;
    for (int64_t r0 = 0; r0 < m; r0 += block) {
      std::vector<float> a_block;  // rows r0 .. r0 + block of op(A), not transposed
      for (int64_t i = r0; i < r0 + block; ++i) {
        for (int64_t p = 0; p < k; ++p) a_block.push_back(a[op_index(ta, i, p, m, k)]);
      }
      Tensor part = Tensor::empty({block, n}, DType::kF32, dev_);
      matmul(upload(a_block, {block, k}), false, tb, false, part, 1.0f, 0.0f, *stream_);
      const auto rows = download(part);
      got.insert(got.end(), rows.begin(), rows.end());
    }
    EXPECT_TRUE(all_close(got, to_double(want), 1e-5, 1e-5)) << "ta=" << ta;
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

// Runs in a fresh process with 3 cores per host device, so the parallel paths (GEMM row split,
// column-split bias_grad, row-split softmax) really run on several threads. Returns the number of
// mismatches, printing each to stderr.
int parallel_kernel_mismatches() {
  set_host_threads_per_device(3);
  const Device dev = host0();
  auto stream = device_runtime(dev).create_stream();
  int bad = 0;
  auto report = [&bad](const char* what, const ::testing::AssertionResult& r) {
    if (!r) {
      std::fprintf(stderr, "%s: %s\n", what, r.message());
      ++bad;
    }
  };
  int threads = 0;  // what kernels on this device's stream see
  host_enqueue(*stream, [&threads] { threads = host_current_threads(); });
  stream->synchronize();
  if (threads != 3) {
    std::fprintf(stderr, "host kernels run with %d threads, expected 3\n", threads);
    ++bad;
  }
  const GemmShape s{250, 64, 96};  // 3 row chunks
  for (bool ta : {false, true}) {
    const auto a = random_vector(s.m * s.k, 1), b = random_vector(s.k * s.n, 2);
    const auto c = random_vector(s.m * s.n, 3);
    Tensor tc = Tensor::from_host(c, {s.m, s.n}, dev, *stream);
    matmul(Tensor::from_host(a, stored_shape(ta, s.m, s.k), dev, *stream), ta,
           Tensor::from_host(b, {s.k, s.n}, dev, *stream), false, tc, 0.5f, 1.0f, *stream);
    std::vector<double> bound;
    const auto want = reference_gemm(ta, false, s, 0.5f, a, b, 1.0f, c, bound);
    report("gemm", all_close(tc.to_host_f32(*stream), want, 1e-5, 1e-5));
  }
  const int64_t rows = 3, cols = 3 * kHostGrain + 7;
  const auto dy = random_vector(rows * cols, 4);
  Tensor db = Tensor::empty({cols}, DType::kF32, dev);
  bias_grad(Tensor::from_host(dy, {rows, cols}, dev, *stream), db, false, *stream);
  std::vector<float> db_want(cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t col = 0; col < cols; ++col) db_want[col] += dy[r * cols + col];
  }
  report("bias_grad", bitwise_equal(db.to_host_f32(*stream), db_want));

  const int64_t xr = 3 * kHostGrain / 10 + 11, xc = 10;
  const auto logits = random_vector(xr * xc, 5, -3, 3);
  Tensor tx = Tensor::from_host(logits, {xr, xc}, dev, *stream);
  Tensor labels = Tensor::from_host_i32(random_labels(xr, xc, 6), {xr}, dev, *stream);
  Tensor loss = Tensor::empty({1}, DType::kF32, dev);
  Tensor row_loss = Tensor::empty({xr}, DType::kF32, dev);
  for (int64_t r = 0; r < xr; ++r) {
    softmax_xent(tx.view(r * xc, {1, xc}), labels.view(r, {1}), row_loss.view(r, {1}), Tensor(),
                 1.0f, *stream);
  }
  softmax_xent(tx, labels, loss, Tensor(), 1.0f, *stream);
  double total = 0.0;
  for (float l : row_loss.to_host_f32(*stream)) total += l;
  report("softmax_xent", bitwise_equal(loss.to_host_f32(*stream),
                                       {static_cast<float>(total / static_cast<double>(xr))}));
  return bad;
}

TEST(HostThreadsOpTest, ParallelKernelsMatchReference) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-executes the binary: no devices exist yet
  // _Exit: the host device's worker threads are still running; skip static destructors.
  EXPECT_EXIT(std::_Exit(parallel_kernel_mismatches() == 0 ? 0 : 1), ::testing::ExitedWithCode(0),
              "");
}

}  // namespace
}  // namespace ls::test
