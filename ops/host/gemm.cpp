// Host GEMM through CBLAS (OpenBLAS), the host kernel of ops/gemm.h.
// OpenBLAS is kept single-threaded: each host device owns its cores and splits a GEMM itself, by
// rows of C over host_parallel_for, one cblas_sgemm per chunk, so N devices never oversubscribe
// the machine. Chunk boundaries depend only on (m, threads), so results are reproducible for a
// given thread count; they may differ in the last bits between thread counts, because OpenBLAS
// picks its kernel (e.g. its small-matrix path) by the size of each call.
// gemm_strided_batched splits over the batch instead, one cblas_sgemm per matrix, so its results
// do not depend on the thread count at all.
#include "ops/gemm.h"

#include <cblas.h>

#include <algorithm>

#include "engine/core/error.h"
#include "engine/core/host/host_device.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// Below this many multiply-adds a GEMM runs as one call: splitting costs more than it saves.
constexpr int64_t kMinSplitFlops = int64_t{1} << 18;
// Fewest rows of C per chunk, so that each call still fills OpenBLAS's register tiles.
constexpr int64_t kMinRowsPerChunk = 16;

void ensure_single_threaded_blas() {
  static const bool once = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)once;
}

// C = beta * C, with BLAS's rule that beta == 0 overwrites (NaN/Inf in C do not propagate).
void scale_c(int64_t m, int64_t n, float beta, float* c, int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    float* row = c + i * ldc;
    if (beta == 0.0f) {
      std::fill(row, row + n, 0.0f);
    } else {
      for (int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

void sgemm_rows(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}


void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                       float* c, int64_t ldc, Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0, "gemm sizes m=", m, " n=", n, " k=", k);
  if (m == 0 || n == 0) return;
  ensure_single_threaded_blas();
  host_enqueue(stream, [=] {
    // BLAS rejects k == 0 (lda < 1); the result is then just beta * C.
    if (k == 0 || alpha == 0.0f) {
      scale_c(m, n, beta, c, ldc);
      return;
    }
    const int64_t threads = host_current_threads();
    if (threads <= 1 || m < 2 * kMinRowsPerChunk || m * n * k < kMinSplitFlops) {
      sgemm_rows(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      return;
    }
    // One chunk of rows per core: fewer, larger calls are what OpenBLAS is fast at.
    const int64_t grain = std::max(kMinRowsPerChunk, (m + threads - 1) / threads);
    host_parallel_for(0, m, grain, [=](int64_t r0, int64_t r1) {
      // Row r of op(A) is row r of A, or column r of A when A is stored transposed (k x m).
      const float* a_rows = trans_a ? a + r0 : a + r0 * lda;
      sgemm_rows(trans_a, trans_b, r1 - r0, n, k, alpha, a_rows, lda, b, ldb, beta, c + r0 * ldc,
                 ldc);
    });
  });
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, Stream& stream) {
  LS_ASSERT(m >= 0 && n >= 0 && k >= 0 && batch >= 0, "gemm_strided_batched sizes m=", m, " n=", n,
            " k=", k, " batch=", batch);
  if (m == 0 || n == 0 || batch == 0) return;
  ensure_single_threaded_blas();
  // Enough matrices per chunk that each chunk is worth a task.
  const int64_t grain = std::max<int64_t>(1, kMinSplitFlops / std::max<int64_t>(1, m * n * k));
  host_enqueue(stream, [=] {
    host_parallel_for(0, batch, grain, [=](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        float* ci = c + i * stride_c;
        if (k == 0 || alpha == 0.0f) {  // BLAS rejects k == 0; the result is beta * C
          scale_c(m, n, beta, ci, ldc);
        } else {
          sgemm_rows(trans_a, trans_b, m, n, k, alpha, a + i * stride_a, lda, b + i * stride_b, ldb,
                     beta, ci, ldc);
        }
      }
    });
  });
}

const GemmOps kHostGemm{
    .gemm = gemm,
    .gemm_strided_batched = gemm_strided_batched,
};
LS_REGISTER_OP_TABLE(GemmOps, DeviceKind::kHost, kHostGemm);

}  // namespace
}  // namespace ls
