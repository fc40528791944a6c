// fill / scale / axpy / add / cast: argument checks (dtypes, equal element counts, one device),
// then the stream's kernel table.
#include "ops/elementwise.h"

#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {
namespace {

void expect(const char* op, const char* name, const Tensor& t, DType dtype, const Stream& stream) {
  LS_CHECK(t.defined(), op, ": ", name, " is an undefined Tensor; pass a ", dtype_name(dtype),
           " tensor");
  LS_CHECK(t.dtype() == dtype, op, ": ", name, " is ", t.describe(), "; expected dtype ",
           dtype_name(dtype));
  LS_CHECK(t.device() == stream.device(), op, ": ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
}

void expect_same_numel(const char* op, const char* name, const Tensor& t, const char* ref_name,
                       const Tensor& ref) {
  LS_CHECK(t.numel() == ref.numel(), op, ": ", name, " is ", t.describe(), " but ", ref_name,
           " is ", ref.describe(), "; expected the same number of elements");
}

}  // namespace

void count_nonfinite(const Tensor& x, const Tensor& count, Stream& stream) {
  expect("count_nonfinite", "x", x, DType::kF32, stream);
  expect("count_nonfinite", "count", count, DType::kI32, stream);
  LS_CHECK(count.numel() == 1, "count_nonfinite: count must hold one element, got ", count.describe());
  kernels_for(stream.device()).count_nonfinite(x.f32(), x.numel(), count.i32(), stream);
}

void fill(const Tensor& x, float value, Stream& stream) {
  expect("fill", "x", x, DType::kF32, stream);
  kernels_for(stream.device()).fill(x.f32(), x.numel(), value, stream);
}

void scale(const Tensor& x, float alpha, Stream& stream) {
  expect("scale", "x", x, DType::kF32, stream);
  kernels_for(stream.device()).scale(x.f32(), x.numel(), alpha, stream);
}

void axpy(float alpha, const Tensor& x, const Tensor& y, Stream& stream) {
  expect("axpy", "x", x, DType::kF32, stream);
  expect("axpy", "y", y, DType::kF32, stream);
  expect_same_numel("axpy", "y", y, "x", x);
  kernels_for(stream.device()).axpy(alpha, x.f32(), y.f32(), x.numel(), stream);
}

void add(const Tensor& a, const Tensor& b, const Tensor& out, Stream& stream) {
  expect("add", "a", a, DType::kF32, stream);
  expect("add", "b", b, DType::kF32, stream);
  expect("add", "out", out, DType::kF32, stream);
  expect_same_numel("add", "b", b, "a", a);
  expect_same_numel("add", "out", out, "a", a);
  kernels_for(stream.device()).add(a.f32(), b.f32(), out.f32(), a.numel(), stream);
}

void cast(const Tensor& src, const Tensor& dst, Stream& stream) {
  LS_CHECK(src.defined() && dst.defined(), "cast: src and dst must both be defined tensors");
  const bool to_bf16 = src.dtype() == DType::kF32 && dst.dtype() == DType::kBF16;
  const bool to_f32 = src.dtype() == DType::kBF16 && dst.dtype() == DType::kF32;
  LS_CHECK(to_bf16 || to_f32, "cast: src is ", src.describe(), " and dst is ", dst.describe(),
           "; supported casts are f32 -> bf16 and bf16 -> f32 (use copy_from for same dtype)");
  expect("cast", "src", src, src.dtype(), stream);
  expect("cast", "dst", dst, dst.dtype(), stream);
  expect_same_numel("cast", "dst", dst, "src", src);
  const Kernels& kernels = kernels_for(stream.device());
  if (to_bf16) {
    kernels.cast_f32_to_bf16(src.f32(), dst.bf16(), src.numel(), stream);
  } else {
    kernels.cast_bf16_to_f32(src.bf16(), dst.f32(), src.numel(), stream);
  }
}

}  // namespace ls
