// Element-wise utilities over whole tensors (shapes may differ; element counts must match). An
// output may be the same tensor as an input, never a partial overlap. Asynchronous in stream
// order; bad arguments raise ls::Error at the call. Kernels: ops/host/elementwise.cpp,
// ops/cuda/elementwise.cu.
#pragma once

#include <cstdint>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

struct ElementwiseOps {
  // x[i] = value
  void (*fill)(float* x, int64_t n, float value, Stream& stream) = nullptr;
  // x[i] *= alpha
  void (*scale)(float* x, int64_t n, float alpha, Stream& stream) = nullptr;
  // y[i] += alpha * x[i]
  void (*axpy)(float alpha, const float* x, float* y, int64_t n, Stream& stream) = nullptr;
  // out[i] = a[i] + b[i] (out may alias a or b)
  void (*add)(const float* a, const float* b, float* out, int64_t n, Stream& stream) = nullptr;
  // *count = number of NaN or +-Inf values among x[0..n) (saturating at INT32_MAX)
  void (*count_nonfinite)(const float* x, int64_t n, int32_t* count, Stream& stream) = nullptr;
  // The same count as a float (exact up to 2^24, and never 0 when there is one), so that it can
  // ride in an f32 all-reduce beside the loss.
  void (*count_nonfinite_f32)(const float* x, int64_t n, float* count, Stream& stream) = nullptr;
  // y[i] = bf16(x[i]), round to nearest even, NaN stays NaN
  void (*cast_f32_to_bf16)(const float* x, uint16_t* y, int64_t n, Stream& stream) = nullptr;
  // y[i] = f32(x[i]), exact
  void (*cast_bf16_to_f32)(const uint16_t* x, float* y, int64_t n, Stream& stream) = nullptr;
  // x[r, c] = value (bf16 bits) for every row r < rows and column first <= c < cols, x [rows, cols]
  void (*fill_columns_bf16)(uint16_t* x, int64_t rows, int64_t cols, int64_t first, uint16_t value,
                            Stream& stream) = nullptr;
};

// count: i32 [1], or f32 [1] (see count_nonfinite_f32 above)
inline void count_nonfinite(const Tensor& x, const Tensor& count, Stream& stream) {
  op_check::tensor("count_nonfinite", "x", x, DType::kF32, stream);
  op_check::scalar("count_nonfinite", "count", count);
  if (count.dtype() == DType::kF32) {
    op_check::tensor("count_nonfinite", "count", count, DType::kF32, stream);
    op_entry(&ElementwiseOps::count_nonfinite_f32, "count_nonfinite", stream, [&] {
      return OpLaunches{ledger::moves("count_nonfinite_kernel", {&x})};
    })(x.f32(), x.numel(), count.f32(), stream);
    return;
  }
  op_check::tensor("count_nonfinite", "count", count, DType::kI32, stream);
  op_entry(&ElementwiseOps::count_nonfinite, "count_nonfinite", stream, [&] {
    return OpLaunches{ledger::moves("count_nonfinite_kernel", {&x})};
  })(x.f32(), x.numel(), count.i32(), stream);
}

// x = value (f32)
inline void fill(const Tensor& x, float value, Stream& stream) {
  op_check::tensor("fill", "x", x, DType::kF32, stream);
  op_entry(&ElementwiseOps::fill, "fill", stream, [&] {
    return OpLaunches{ledger::moves("fill_kernel", {&x})};
  })(x.f32(), x.numel(), value, stream);
}

// The columns [first, cols) of every row of a bf16 matrix x [rows, cols] set to `value` rounded to
// bf16 (-infinity masks them out of a softmax: a padded vocabulary's extra logits).
inline void fill_columns(const Tensor& x, int64_t first, float value, Stream& stream) {
  op_check::tensor("fill_columns", "x", x, DType::kBF16, stream);
  op_check::matrix("fill_columns", "x", x, "a 2-D bf16 tensor: reshape it first");
  LS_CHECK(first >= 0 && first <= x.dim(1), "fill_columns: first column ", first, " is outside x, ",
           x.describe(), "; expected 0 to ", x.dim(1));
  if (first == x.dim(1) || x.dim(0) == 0) return;
  op_entry(&ElementwiseOps::fill_columns_bf16, "fill_columns", stream, [&] {
    const int64_t filled = x.dim(0) * (x.dim(1) - first);
    return OpLaunches{
        ledger::elementwise("fill_columns_bf16_kernel", filled, 2.0 * static_cast<double>(filled))};
  })(x.bf16(), x.dim(0), x.dim(1), first, f32_to_bf16(value), stream);
}

// x *= alpha (f32)
inline void scale(const Tensor& x, float alpha, Stream& stream) {
  op_check::tensor("scale", "x", x, DType::kF32, stream);
  op_entry(&ElementwiseOps::scale, "scale", stream, [&] {
    return OpLaunches{ledger::moves("scale_kernel", {&x, &x})};
  })(x.f32(), x.numel(), alpha, stream);
}

// y += alpha x
inline void axpy(float alpha, const Tensor& x, const Tensor& y, Stream& stream) {
  op_check::tensor("axpy", "x", x, DType::kF32, stream);
  op_check::tensor("axpy", "y", y, DType::kF32, stream);
  op_check::same_numel("axpy", "y", y, "x", x);
  op_entry(&ElementwiseOps::axpy, "axpy", stream, [&] {
    return OpLaunches{ledger::moves("axpy_kernel", {&x, &y, &y})};
  })(alpha, x.f32(), y.f32(), x.numel(), stream);
}

// out = a + b
inline void add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) {
  op_check::tensor("add", "a", a, DType::kF32, stream);
  op_check::tensor("add", "b", b, DType::kF32, stream);
  op_check::tensor("add", "out", out, DType::kF32, stream);
  op_check::same_numel("add", "b", b, "a", a);
  op_check::same_numel("add", "out", out, "a", a);
  op_entry(&ElementwiseOps::add, "add", stream, [&] {
    return OpLaunches{ledger::moves("add_kernel", {&a, &b, &out})};
  })(a.f32(), b.f32(), out.f32(), a.numel(), stream);
}

// dst = src converted by the tensors' dtypes: f32 -> bf16 (round to nearest even, NaN stays
// NaN) or bf16 -> f32 (exact).
inline void cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  LS_CHECK(src.defined() && dst.defined(), "cast: src and dst must both be defined tensors");
  const bool to_bf16 = src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16;
  const bool to_f32 = src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32;
  LS_CHECK(to_bf16 || to_f32, "cast: src is ", src.describe(), " and dst is ", dst.describe(),
           "; supported casts are f32 -> bf16 and bf16 -> f32 (use copy_from for same dtype)");
  op_check::tensor("cast", "src", src, src.dtype(), stream);
  op_check::tensor("cast", "dst", dst, dst.dtype(), stream);
  op_check::same_numel("cast", "dst", dst, "src", src);
  if (to_bf16) {
    op_entry(&ElementwiseOps::cast_f32_to_bf16, "cast f32 -> bf16", stream, [&] {
      return OpLaunches{ledger::moves("cast_f32_to_bf16_kernel", {&src, &dst})};
    })(src.f32(), dst.bf16(), src.numel(), stream);
  } else {
    op_entry(&ElementwiseOps::cast_bf16_to_f32, "cast bf16 -> f32", stream, [&] {
      return OpLaunches{ledger::moves("cast_bf16_to_f32_kernel", {&src, &dst})};
    })(src.bf16(), dst.f32(), src.numel(), stream);
  }
}

// A new bf16 tensor holding src (f32) cast to bf16, on src's device, in stream order.
inline Tensor cast_to_bf16(const Tensor& src, Stream& stream) {
  Tensor out = Tensor::empty(src.shape(), DType::kBF16, src.device());
  cast(src, out, stream);
  return out;
}

}  // namespace ls
