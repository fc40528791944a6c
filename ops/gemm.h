// Matrix multiply on 2-D f32 tensors (row-major, contiguous). Kernels: ops/host/gemm.cpp
// (CBLAS), ops/cuda/gemm.cu (cuBLAS).
//
// matmul: C = alpha * op(A) op(B) + beta * C, op(X) = X or X^T as trans_x says; op(a) must be
// [m, k], op(b) [k, n] and c [m, n]. beta == 0 overwrites C (NaN in C does not propagate).
// c must not overlap a or b. Asynchronous in stream order; every tensor must be on the stream's
// device. Bad arguments raise ls::Error at the call, naming the argument and its shape.
// matmul_batched: the same on 3-D [batch, rows, cols] tensors, one product per leading index
// (e.g. the per-head Q K^T and P V of attention).
// precision (lockstep/precision.h): kBF16 / kF16 round every element of A and B to that type
// before multiplying, with f32 accumulation and an f32 C (cuBLAS: 16-bit A and B, f32 C,
// CUBLAS_COMPUTE_32F; host: the operands rounded, then an f32 GEMM). The inputs are not modified.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

#include <lockstep/error.h>
#include <lockstep/precision.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct GemmOps {
  // C[m,n] = alpha * op(A) * op(B) + beta * C, row-major; op(A) is m x k: A is m x k (lda >= k)
  // or, transposed, k x m (lda >= m); likewise B. beta == 0 overwrites C.
  void (*gemm)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc, Precision precision, Stream& stream) = nullptr;
  // For i in [0, batch): gemm above on A_i = a + i * stride_a, B_i = b + i * stride_b and
  // C_i = c + i * stride_c (the C_i must not overlap each other).
  void (*gemm_strided_batched)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const float* a, int64_t lda, int64_t stride_a,
                               const float* b, int64_t ldb, int64_t stride_b, float beta, float* c,
                               int64_t ldc, int64_t stride_c, int64_t batch, Precision precision,
                               Stream& stream) = nullptr;
  // gemm with precision kBF16 on operands already in bf16 (their bits), so no rounded copies.
  void (*gemm_bf16)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
                    float* c, int64_t ldc, Stream& stream) = nullptr;
  // gemm_strided_batched with precision kBF16 on operands already in bf16.
  void (*gemm_strided_batched_bf16)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                                    float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                                    const uint16_t* b, int64_t ldb, int64_t stride_b, float beta,
                                    float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                                    Stream& stream) = nullptr;
};

namespace detail {
struct GemmDims {
  int64_t m, n, k;
};

// What ops/cuda/gemm.cu launches for `batch` products op(A) op(B) -> C (m x n x k), for the step
// ledger (ops/op_ledger.h): cublasSgemm on f32 (the f32 units, no TF32); a 16-bit product
// (cublasGemmEx, tensor cores) on operands stored in 16 bits, or on 16-bit copies of f32 operands
// that one round_operand_kernel each writes first; only a scale of C when k == 0.
inline OpLaunches gemm_launches(bool trans_a, bool trans_b, const GemmDims& d, int64_t batch,
                                bool stored_16bit, Precision precision, float beta) {
  const bool batched = batch != 1;
  if (d.m == 0 || d.n == 0 || batch == 0) return {};
  if (d.k == 0) {
    return {ledger::elementwise("scale_matrix_kernel", d.m * d.n * batch,
                                8.0 * static_cast<double>(d.m * d.n * batch))};
  }
  const bool reads_c = beta != 0.0f;
  if (precision == Precision::kF32 && !stored_16bit) {
    return {ledger::gemm(batched ? "cublasSgemmStridedBatched" : "cublasSgemm", trans_a, trans_b,
                         d.m, d.n, d.k, batch, 4, 4, 4, reads_c, LaunchRate::kF32Math)};
  }
  OpLaunches launches;
  if (!stored_16bit) {
    for (const int64_t elements : {d.m * d.k * batch, d.k * d.n * batch}) {
      launches.push_back(ledger::elementwise("round_operand_kernel", elements,
                                             6.0 * static_cast<double>(elements)));
    }
  }
  launches.push_back(ledger::gemm(batched ? "cublasGemmStridedBatchedEx" : "cublasGemmEx", trans_a,
                                  trans_b, d.m, d.n, d.k, batch, 2, 2, 4, reads_c,
                                  LaunchRate::kTensorCore));
  return launches;
}

// "op(a) is 784 x 128 (a is f32[128, 784] on host:0, trans_a=true)"
inline std::string describe_gemm_operand(const char* name, const Tensor& t, bool trans,
                                         int64_t rows, int64_t cols) {
  return ls::detail::concat("op(", name, ") is ", rows, " x ", cols, " (", name, " is ",
                            t.describe(), ", trans_", name, "=", trans ? "true" : "false", ")");
}

// The [m, n, k] of op(a) op(b), the matrices being dims (lead, lead + 1) of a, b and c (lead 0
// for matmul, 1 for matmul_batched); an ls::Error that says which flag would make shapes agree.
// a_columns >= 0: only a's first a_columns columns take part (see matmul_bf16).
inline GemmDims check_gemm_shapes(const char* op, const Tensor& a, bool trans_a, const Tensor& b,
                                  bool trans_b, const Tensor& c, int lead, int64_t a_columns = -1) {
  const int r = lead, q = lead + 1;
  const int64_t a_cols = a_columns >= 0 ? a_columns : a.dim(q);
  const int64_t m = trans_a ? a_cols : a.dim(r);
  const int64_t k = trans_a ? a.dim(r) : a_cols;
  const int64_t kb = trans_b ? b.dim(q) : b.dim(r);
  const int64_t n = trans_b ? b.dim(r) : b.dim(q);
  if (k != kb) {
    // Suggest the flag that would make the shapes agree, the usual cause of this error.
    const char* hint = "";
    if (k == (trans_b ? b.dim(r) : b.dim(q))) {
      hint = trans_b ? "; pass trans_b=false?" : "; pass trans_b=true?";
    } else if ((trans_a ? a_cols : a.dim(r)) == kb) {
      hint = trans_a ? "; pass trans_a=false?" : "; pass trans_a=true?";
    }
    LS_THROW(op, ": inner dimensions differ: ", describe_gemm_operand("a", a, trans_a, m, k),
             " and ", describe_gemm_operand("b", b, trans_b, kb, n), hint);
  }
  LS_CHECK(c.dim(r) == m && c.dim(q) == n, op, ": c is ", c.describe(), "; expected [",
           lead == 1 ? ls::detail::concat(c.dim(0), ", ") : std::string(), m, ", ", n,
           "] (rows of op(a) x columns of op(b)): ", describe_gemm_operand("a", a, trans_a, m, k),
           ", ", describe_gemm_operand("b", b, trans_b, k, n));
  LS_CHECK(!op_check::overlaps(c, a) && !op_check::overlaps(c, b), op, ": c (", c.describe(),
           ") overlaps an input; write the product to a separate tensor");
  return {m, n, k};
}

inline GemmDims check_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                             const Tensor& c, const Stream& stream) {
  for (auto [name, t] : {std::pair{"a", &a}, {"b", &b}, {"c", &c}}) {
    if (t->defined()) op_check::matrix("matmul", name, *t, "a 2-D f32 tensor: reshape it first");
    op_check::tensor("matmul", name, *t, DType::kF32, stream);
  }
  return check_gemm_shapes("matmul", a, trans_a, b, trans_b, c, 0);
}

inline GemmDims check_matmul_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                     const Tensor& c, int64_t batch, const Stream& stream,
                                     const char* op = "matmul_batched",
                                     DType operands = DType::kF32) {
  LS_CHECK(batch >= 0, op, ": batch = ", batch, "; expected a count >= 0");
  for (auto [name, t, dtype] :
       {std::tuple{"a", &a, operands}, {"b", &b, operands}, {"c", &c, DType::kF32}}) {
    op_check::tensor(op, name, *t, dtype, stream);
    LS_CHECK(t->ndim() == 3 && t->dim(0) == batch, op, ": ", name, " is ", t->describe(),
             "; expected a 3-D [batch, rows, cols] tensor with batch = ", batch,
             " (reshape it to [", batch, ", rows, cols] first)");
  }
  return check_gemm_shapes(op, a, trans_a, b, trans_b, c, 1);
}
}  // namespace detail

inline void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                   float alpha, float beta, Stream& stream,
                   Precision precision = Precision::kF32) {
  const detail::GemmDims d = detail::check_matmul(a, trans_a, b, trans_b, c, stream);
  op_entry(&GemmOps::gemm, "matmul", stream,
           [&] { return detail::gemm_launches(trans_a, trans_b, d, 1, false, precision, beta); })(
      trans_a, trans_b, d.m, d.n, d.k, alpha, a.f32(), a.dim(1), b.f32(), b.dim(1), beta, c.f32(),
      c.dim(1), precision, stream);
}

// matmul with precision kBF16 on operands stored in bf16: a and b DType::kBF16, c f32. The same
// numbers as matmul(f32 a, f32 b, ..., kBF16) when a and b hold those tensors cast to bf16, without
// rounding copies of them on every call: a caller that multiplies one operand several times
// (a Linear's input and weight in forward and backward) casts it once (cast in ops/elementwise.h).
// a_columns >= 0 multiplies only a's first a_columns columns, read in place (lda stays a's row
// length): the data part of a matrix padded with extra columns (the padded vocabulary's dlogits,
// Note [The padded vocabulary], engine/model/nn/functional.cpp).
inline void matmul_bf16(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                        const Tensor& c, float alpha, float beta, Stream& stream,
                        int64_t a_columns = -1) {
  for (auto [name, t, dtype] : {std::tuple{"a", &a, DType::kBF16}, {"b", &b, DType::kBF16},
                                {"c", &c, DType::kF32}}) {
    if (t->defined()) op_check::matrix("matmul_bf16", name, *t, "a 2-D tensor: reshape it first");
    op_check::tensor("matmul_bf16", name, *t, dtype, stream);
  }
  LS_CHECK(a_columns < 0 || (a.ndim() == 2 && a_columns <= a.dim(1)),
           "matmul_bf16: a_columns = ", a_columns, " of a, which is ", a.describe(),
           "; expected at most its columns");
  const detail::GemmDims d =
      detail::check_gemm_shapes("matmul_bf16", a, trans_a, b, trans_b, c, 0, a_columns);
  op_entry(&GemmOps::gemm_bf16, "matmul_bf16", stream,
           [&] {
             return detail::gemm_launches(trans_a, trans_b, d, 1, true, Precision::kBF16, beta);
           })(trans_a, trans_b, d.m, d.n, d.k, alpha, a.bf16(), a.dim(1), b.bf16(), b.dim(1), beta,
              c.f32(), c.dim(1), stream);
}

// For i in [0, batch): c[i] = alpha op(a[i]) op(b[i]) + beta c[i]; a, b, c are 3-D
// [batch, rows, cols] and contiguous, each matrix checked as matmul checks it.
inline void matmul_batched(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const Tensor& c, int64_t batch, float alpha, float beta,
                           Stream& stream, Precision precision = Precision::kF32) {
  const detail::GemmDims d = detail::check_matmul_batched(a, trans_a, b, trans_b, c, batch, stream);
  op_entry(&GemmOps::gemm_strided_batched, "matmul_batched", stream,
           [&] {
             return detail::gemm_launches(trans_a, trans_b, d, batch, false, precision, beta);
           })(trans_a, trans_b, d.m, d.n, d.k, alpha, a.f32(), a.dim(2), a.dim(1) * a.dim(2),
              b.f32(), b.dim(2), b.dim(1) * b.dim(2), beta, c.f32(), c.dim(2), c.dim(1) * c.dim(2),
              batch, precision, stream);
}

// matmul_batched with precision kBF16 on operands stored in bf16 (a and b DType::kBF16, c f32):
// matmul_bf16 for batches, bit for bit matmul_batched(..., kBF16) of the tensors they came from.
inline void matmul_batched_bf16(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                const Tensor& c, int64_t batch, float alpha, float beta,
                                Stream& stream) {
  const detail::GemmDims d = detail::check_matmul_batched(a, trans_a, b, trans_b, c, batch, stream,
                                                          "matmul_batched_bf16", DType::kBF16);
  op_entry(&GemmOps::gemm_strided_batched_bf16, "matmul_batched_bf16", stream,
           [&] {
             return detail::gemm_launches(trans_a, trans_b, d, batch, true, Precision::kBF16, beta);
           })(trans_a, trans_b, d.m, d.n, d.k, alpha, a.bf16(), a.dim(2), a.dim(1) * a.dim(2),
              b.bf16(), b.dim(2), b.dim(1) * b.dim(2), beta, c.f32(), c.dim(2), c.dim(1) * c.dim(2),
              batch, stream);
}

}  // namespace ls
