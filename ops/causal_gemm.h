// The per-head products of causal attention, with the blocks above the diagonal skipped.
//
// Under a causal mask query i sees keys j <= i only, so the probabilities P and their gradient dS
// are zero above the diagonal, and so is every product term that reads them there. Splitting the
// T rows into blocks of `block`, query block i needs key blocks 0..i only: the products below do
// (n + 1) / 2n of the multiply-adds of the full [T, T] ones (n = T / block blocks; 5/8 at n = 4)
// through the same GEMM slots (ops/gemm.h), one batched call per block. The terms they leave out
// are exact zeros, so results equal the full products' up to the GEMM's summation order. With
// block >= T there is one block: the full products, of any L (nn::attention without a mask).
//
// All tensors are 3-D [batch, rows, cols], contiguous; operands f32 (rounded to `precision` as
// matmul_batched does) or all DType::kBF16 (matmul_batched_bf16's operands); outputs f32.
//   causal_scores:  s = x y^T on the blocks on and below the diagonal. x, y [batch, T, D],
//                   s [batch, T, T]; s above the block diagonal is not written.
//   causal_apply:   c = L y (transposed: c = L^T y), L [batch, T, T] lower triangular (read on
//                   and below the block diagonal only; zero above the diagonal within it),
//                   y and c [batch, T, D].
// Asynchronous in stream order; bad arguments raise ls::Error at the call.
#pragma once

#include <algorithm>
#include <cstdint>

#include "ops/gemm.h"
#include "ops/host/onednn_matmul.h"

namespace ls {
namespace detail {

// The GEMM of one block: pointers are offsets (in elements) into the operands; the leading
// dimensions and batch strides are the operands' own.
struct BlockGemm {
  bool trans_a, trans_b;
  int64_t m, n, k;
  int64_t a_offset, lda, b_offset, ldb, c_offset, ldc;
};

inline void run_block_gemm(const BlockGemm& g, const Tensor& a, const Tensor& b, const Tensor& c,
                           int64_t batch, Precision precision, Stream& stream) {
  const int64_t stride_a = a.dim(1) * a.dim(2), stride_b = b.dim(1) * b.dim(2);
  const int64_t stride_c = c.dim(1) * c.dim(2);
  if (a.dtype() == DType::kBF16) {
    op_entry(&GemmOps::gemm_strided_batched_bf16, "causal attention product", stream,
             [&] {
               return gemm_launches(g.trans_a, g.trans_b, {g.m, g.n, g.k}, batch, true,
                                    Precision::kBF16, 0.0f);
             })(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a.bf16() + g.a_offset, g.lda, stride_a,
                b.bf16() + g.b_offset, g.ldb, stride_b, 0.0f, c.f32() + g.c_offset, g.ldc, stride_c,
                batch, stream);
  } else {
    op_entry(&GemmOps::gemm_strided_batched, "causal attention product", stream,
             [&] {
               return gemm_launches(g.trans_a, g.trans_b, {g.m, g.n, g.k}, batch, false, precision,
                                    0.0f);
             })(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, a.f32() + g.a_offset, g.lda, stride_a,
                b.f32() + g.b_offset, g.ldb, stride_b, 0.0f, c.f32() + g.c_offset, g.ldc, stride_c,
                batch, precision, stream);
  }
}

// Checks a, b, c as matmul_batched (or matmul_batched_bf16) checks op(a) op(b) -> c, and block.
inline void check_causal_product(const char* op, const Tensor& a, bool trans_a, const Tensor& b,
                                 bool trans_b, const Tensor& c, int64_t block,
                                 const Stream& stream) {
  LS_CHECK(a.dtype() == b.dtype() && (a.dtype() == DType::kF32 || a.dtype() == DType::kBF16), op,
           ": operands are ", a.describe(), " and ", b.describe(),
           "; expected both f32 or both bf16");
  const int64_t batch = a.ndim() == 3 ? a.dim(0) : -1;
  check_matmul_batched(a, trans_a, b, trans_b, c, batch, stream, op, a.dtype());
  LS_CHECK(block > 0, op, ": block = ", block, "; expected a block of rows > 0");
}

}  // namespace detail

// The block for T rows of a product on `device` in `precision`; a block >= T is one block, the
// full products. Measured on two CPUs (bench/micro/attention.cpp, attention/causal-products,
// docs/benchmarks.md, issue 24 part 3), the six products' time against the full ones:
// - host, bf16 on AMX tiles (Intel Xeon): oneDNN runs the full products on AMX but the strided
//   block operands on its slower gemm:jit, so blocks lose up to T = 256 (1.4-1.7x the time) and
//   win from T = 512 (blocks of 64: 0.75x at T = 512 and 1024): full products to T = 256, then 64.
// - host otherwise (f32 anywhere; bf16 on AVX512-BF16, AMD EPYC): T / 4 rows within [64, 128]:
//   0.66-0.91x from T = 256 on both CPUs and 0.83-1.04x at T = 128; blocks of 32 took 2.8x the
//   full products' time in f32 on the Xeon (0.78x on the EPYC).
// - CUDA (not measured on a GPU yet): T / 4 rows within [32, 128].
inline int64_t causal_block_rows(int64_t t, Precision precision, DeviceKind device) {
  if (device != DeviceKind::kHost) return std::clamp<int64_t>(t / 4, 32, 128);
  if (precision == Precision::kBF16 && onednn::bf16_on_amx()) return t <= 256 ? t : 64;
  return std::clamp<int64_t>(t / 4, 64, 128);
}

// s = x y^T on the blocks on and below the diagonal (see the top of this file).
inline void causal_scores(const Tensor& x, const Tensor& y, const Tensor& s, int64_t block,
                          Stream& stream, Precision precision = Precision::kF32) {
  detail::check_causal_product("causal_scores", x, false, y, true, s, block, stream);
  const int64_t t = x.dim(1), d = x.dim(2), batch = x.dim(0);
  for (int64_t first = 0; first < t; first += block) {
    const int64_t rows = std::min(block, t - first), keys = first + rows;
    detail::run_block_gemm({false, true, rows, keys, d, first * d, d, 0, d, first * t, t}, x, y, s,
                           batch, precision, stream);
  }
}

// c = L y, or c = L^T y when transposed (see the top of this file).
inline void causal_apply(const Tensor& l, bool transposed, const Tensor& y, const Tensor& c,
                         int64_t block, Stream& stream, Precision precision = Precision::kF32) {
  detail::check_causal_product("causal_apply", l, transposed, y, false, c, block, stream);
  const int64_t t = l.dim(1), d = y.dim(2), batch = l.dim(0);
  for (int64_t first = 0; first < t; first += block) {
    const int64_t rows = std::min(block, t - first);
    if (transposed) {
      // Keys [first, first + rows) are seen by the queries from `first` on only:
      // c[keys] = L[first.., keys]^T y[first..].
      detail::run_block_gemm(
          {true, false, rows, d, t - first, first * t + first, t, first * d, d, first * d, d}, l, y,
          c, batch, precision, stream);
    } else {
      // Queries [first, first + rows) see keys 0..first + rows: c_i = L[i, ..keys] y[..keys].
      detail::run_block_gemm(
          {false, false, rows, d, first + rows, first * t, t, 0, d, first * d, d}, l, y, c, batch,
          precision, stream);
    }
  }
}

}  // namespace ls
