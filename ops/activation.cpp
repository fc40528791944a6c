// relu / gelu and their backward passes: argument checks (f32, equal element counts, one
// device), then the stream's kernel table.
#include "ops/activation.h"

#include "engine/core/error.h"
#include "ops/kernels.h"

namespace ls {
namespace {

void expect_f32(const char* op, const char* name, const Tensor& t, const Stream& stream) {
  LS_CHECK(t.defined(), op, ": ", name, " is an undefined Tensor; pass an f32 tensor");
  LS_CHECK(t.dtype() == DType::kF32, op, ": ", name, " is ", t.describe(), "; expected dtype f32");
  LS_CHECK(t.device() == stream.device(), op, ": ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
}

void expect_same_numel(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  LS_CHECK(t.numel() == x.numel(), op, ": ", name, " is ", t.describe(), " but x is ", x.describe(),
           "; expected the same number of elements (", x.numel(), ")");
}

void check_forward(const char* op, const Tensor& x, const Tensor& y, const Stream& stream) {
  expect_f32(op, "x", x, stream);
  expect_f32(op, "y", y, stream);
  expect_same_numel(op, "y", y, x);
}

void check_backward(const char* op, const Tensor& x, const Tensor& dy, const Tensor& dx,
                    const Stream& stream) {
  expect_f32(op, "x", x, stream);
  expect_f32(op, "dy", dy, stream);
  expect_f32(op, "dx", dx, stream);
  expect_same_numel(op, "dy", dy, x);
  expect_same_numel(op, "dx", dx, x);
}

}  // namespace

void relu(const Tensor& x, const Tensor& y, Stream& stream) {
  check_forward("relu", x, y, stream);
  kernels_for(stream.device()).relu(x.f32(), y.f32(), x.numel(), stream);
}

void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                   Stream& stream) {
  check_backward("relu_backward", x, dy, dx, stream);
  kernels_for(stream.device())
      .relu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate, stream);
}

void gelu(const Tensor& x, const Tensor& y, Stream& stream) {
  check_forward("gelu", x, y, stream);
  kernels_for(stream.device()).gelu(x.f32(), y.f32(), x.numel(), stream);
}

void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                   Stream& stream) {
  check_backward("gelu_backward", x, dy, dx, stream);
  kernels_for(stream.device())
      .gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), accumulate, stream);
}

}  // namespace ls
