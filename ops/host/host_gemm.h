// One matrix product on the calling thread, for host kernels that multiply inside their own loops
// (ops/host/fused_attention.cpp) instead of through the stream-ordered slots of ops/gemm.h.
// Row-major, as GemmOps has it: C = alpha * op(A) op(B) + beta * C, op(A) m x k stored m x k (lda
// >= k) or, trans_a, k x m (lda >= m); likewise B; C f32, m x n; beta == 0 overwrites C. The
// libraries and their choice per shape are the host GEMM's (ops/host/gemm.cpp), one call, not
// split over cores: the caller has split its work already.
#pragma once

#include <cstdint>

namespace ls {

// f32 operands: oneDNN where it measured faster, OpenBLAS otherwise.
void host_gemm_f32(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                   int64_t ldc);

// bf16 operands (bits) on the CPU's bf16 units with f32 accumulation. Only where
// onednn::native_bf16_enabled(); elsewhere widen the operands and call host_gemm_f32, which
// gives the same products up to the order of the f32 sums.
void host_gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                    float* c, int64_t ldc);

}  // namespace ls
