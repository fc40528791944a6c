// bf16 GEMMs on the CPU's bf16 units through oneDNN (ops/host/onednn_matmul.h): the product of
// bf16-rounded operands accumulated in f32 (the GPU's contract), for every transpose, alpha, beta,
// padded leading dimension and batch stride; BLAS's beta == 0 rule; NaN propagation; the kernel
// oneDNN picked runs on the bf16 units; ls::matmul takes this path for Precision::kBF16.
// Skipped where the build has no oneDNN or the CPU no bf16 units (the emulated path of
// precision_test.cpp then serves bf16).
#include "ops/host/onednn_matmul.h"

#include <gtest/gtest.h>
#include <lockstep/dtype.h>
#include <lockstep/precision.h>

#include <cmath>
#include <limits>
#include <vector>

#include "op_test_util.h"
#include "ops/gemm.h"

namespace ls::test {
namespace {

using onednn::MatmulShape;
using onednn::OperandType;

bool native() { return onednn::native_bf16_available(); }

// f32 epsilon; an f32 sum of k terms in any order is within about k * eps * sum|terms| of exact.
constexpr double kEps = 1.0 / (1 << 23);

struct Case {
  bool trans_a, trans_b;
  float alpha, beta;
};

// X stored rows x cols with leading dimension ld (>= cols), `batch` matrices `stride` apart,
// filled with random values (padding too: it must never be read into the result).
std::vector<float> stored(int64_t batch, int64_t rows, int64_t ld, int64_t stride, uint32_t seed) {
  return random_vector(static_cast<size_t>((batch - 1) * stride + rows * ld), seed);
}

TEST(OnednnMatmul, Bf16ProductIsTheF32SumOfRoundedProducts) {
  if (!native()) GTEST_SKIP() << "no oneDNN build or no bf16 units on this CPU";
  const int64_t batch = 2, m = 37, n = 29, k = 53, pad = 3;
  for (const Case& t : {Case{false, false, 1.0f, 0.0f}, Case{true, false, 0.5f, 0.25f},
                        Case{false, true, 1.0f, 1.0f}, Case{true, true, -2.0f, 0.0f}}) {
    const int64_t a_rows = t.trans_a ? k : m, a_cols = t.trans_a ? m : k;
    const int64_t b_rows = t.trans_b ? n : k, b_cols = t.trans_b ? k : n;
    const MatmulShape shape{.operands = OperandType::kBF16,
                            .trans_a = t.trans_a,
                            .trans_b = t.trans_b,
                            .batch = batch,
                            .m = m,
                            .n = n,
                            .k = k,
                            .lda = a_cols + pad,
                            .ldb = b_cols + pad,
                            .ldc = n + pad,
                            .stride_a = a_rows * (a_cols + pad) + 5,
                            .stride_b = b_rows * (b_cols + pad) + 7,
                            .stride_c = m * (n + pad) + 2,
                            .alpha = t.alpha,
                            .beta = t.beta};
    const std::vector<float> a = stored(batch, a_rows, shape.lda, shape.stride_a, 1);
    const std::vector<float> b = stored(batch, b_rows, shape.ldb, shape.stride_b, 2);
    const std::vector<float> c0 = stored(batch, m, shape.ldc, shape.stride_c, 3);
    std::vector<uint16_t> a16(a.size()), b16(b.size());
    for (size_t i = 0; i < a.size(); ++i) a16[i] = f32_to_bf16(a[i]);
    for (size_t i = 0; i < b.size(); ++i) b16[i] = f32_to_bf16(b[i]);
    std::vector<float> c = c0;
    onednn::matmul(shape, a16.data(), b16.data(), c.data());

    for (int64_t p = 0; p < batch; ++p) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double exact = 0.0, magnitude = 0.0;
          for (int64_t q = 0; q < k; ++q) {
            const int64_t ai =
                p * shape.stride_a + (t.trans_a ? q * shape.lda + i : i * shape.lda + q);
            const int64_t bi =
                p * shape.stride_b + (t.trans_b ? j * shape.ldb + q : q * shape.ldb + j);
            const double term = double{round_to_bf16(a[ai])} * double{round_to_bf16(b[bi])};
            exact += term;
            magnitude += std::abs(term);
          }
          const int64_t ci = p * shape.stride_c + i * shape.ldc + j;
          const double want = t.alpha * exact + t.beta * double{c0[ci]};
          const double bound =
              (k + 2) * kEps * (std::abs(t.alpha) * magnitude + std::abs(t.beta * c0[ci]));
          ASSERT_NEAR(c[ci], want, bound) << "batch " << p << " row " << i << " col " << j
                                          << " trans " << t.trans_a << t.trans_b;
        }
      }
      // Padding between rows and matrices of C is left alone.
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = n;
             j < shape.ldc && p * shape.stride_c + i * shape.ldc + j < int64_t(c.size()); ++j) {
          const int64_t ci = p * shape.stride_c + i * shape.ldc + j;
          ASSERT_EQ(c[ci], c0[ci]) << "padding at batch " << p << " row " << i << " col " << j;
        }
      }
    }
  }
}

TEST(OnednnMatmul, RunsOnTheBf16Units) {
  if (!native()) GTEST_SKIP() << "no oneDNN build or no bf16 units on this CPU";
  const MatmulShape shape{.m = 256,
                          .n = 256,
                          .k = 256,
                          .lda = 256,
                          .ldb = 256,
                          .ldc = 256,
                          .stride_a = 65536,
                          .stride_b = 65536,
                          .stride_c = 65536};
  const std::string impl = onednn::implementation(shape);
  EXPECT_TRUE(impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos)
      << "oneDNN picked '" << impl << "', not a kernel for the bf16 units";
}

TEST(OnednnMatmul, BetaZeroOverwritesNanAndNanInAPropagates) {
  if (!native()) GTEST_SKIP() << "no oneDNN build or no bf16 units on this CPU";
  const int64_t m = 4, n = 3, k = 5;
  std::vector<uint16_t> a(m * k, f32_to_bf16(1.0f)), b(k * n, f32_to_bf16(2.0f));
  a[2 * k + 1] = f32_to_bf16(std::numeric_limits<float>::quiet_NaN());  // row 2 of A
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  const MatmulShape shape{.m = m,
                          .n = n,
                          .k = k,
                          .lda = k,
                          .ldb = n,
                          .ldc = n,
                          .stride_a = m * k,
                          .stride_b = k * n,
                          .stride_c = m * n};
  onednn::matmul(shape, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      if (i == 2) {
        EXPECT_TRUE(std::isnan(c[i * n + j])) << "row " << i << " col " << j;
      } else {
        EXPECT_EQ(c[i * n + j], 10.0f) << "row " << i << " col " << j;
      }
    }
  }
}

TEST(OnednnMatmul, EnablingWithoutTheUnitsIsAClearError) {
  if (native()) {
    EXPECT_NO_THROW(onednn::set_native_bf16_enabled(true));
    return;
  }
  EXPECT_FALSE(onednn::native_bf16_enabled());
  try {
    onednn::set_native_bf16_enabled(true);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AVX512-BF16"), std::string::npos) << e.what();
  }
}

// ls::matmul with Precision::kBF16 on a host device: the native path, the same numbers as the
// emulated one up to the order of the f32 sums, and repeatable bit for bit.
class NativeBf16Gemm : public OpTestBase {
 protected:
  std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b, bool native,
                             int64_t batch, int64_t m, int64_t n, int64_t k) {
    onednn::set_native_bf16_enabled(native);
    Tensor c = Tensor::empty({batch, m, n}, DType::kF32, dev_);
    matmul_batched(upload(a, {batch, k, m}), true, upload(b, {batch, n, k}), true, c, batch, 1.0f,
                   0.0f, *stream_, Precision::kBF16);
    std::vector<float> out = c.to_host_f32(*stream_);
    onednn::set_native_bf16_enabled(native_bf16_available_);
    return out;
  }
  bool native_bf16_available_ = onednn::native_bf16_available();
};

TEST_F(NativeBf16Gemm, MatchesTheEmulatedPathUpToSummationOrder) {
  if (!native()) GTEST_SKIP() << "no oneDNN build or no bf16 units on this CPU";
  const int64_t batch = 3, m = 33, n = 17, k = 300;
  const std::vector<float> a = random_vector(batch * k * m, 4), b = random_vector(batch * n * k, 5);
  const std::vector<float> native_c = product(a, b, true, batch, m, n, k);
  const std::vector<float> emulated_c = product(a, b, false, batch, m, n, k);
  ASSERT_EQ(native_c.size(), emulated_c.size());
  double worst = 0.0;
  for (size_t i = 0; i < native_c.size(); ++i) {
    // Terms are products of values in [-1, 1]: each sum's magnitude is at most k.
    worst = std::max(worst, std::abs(double{native_c[i]} - emulated_c[i]));
  }
  EXPECT_LE(worst, 2.0 * k * kEps * k);
  EXPECT_EQ(product(a, b, true, batch, m, n, k), native_c) << "not repeatable bit for bit";
}

}  // namespace
}  // namespace ls::test
