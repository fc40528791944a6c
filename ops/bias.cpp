// bias_add / bias_grad: argument checks (f32, y/dy 2-D [rows, cols], bias [cols], one device),
// then the stream's kernel table.
#include "ops/bias.h"

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

// Checks `matrix` is [rows, cols] and `vec` is [cols].
void expect_bias_shapes(const char* op, const char* matrix_name, const Tensor& matrix,
                        const char* vec_name, const Tensor& vec) {
  LS_CHECK(matrix.ndim() == 2, op, ": ", matrix_name, " is ", matrix.describe(),
           "; expected a 2-D [rows, cols] tensor (reshape it to [-1, features])");
  LS_CHECK(vec.ndim() == 1 && vec.dim(0) == matrix.dim(1), op, ": ", vec_name, " is ",
           vec.describe(), "; expected [", matrix.dim(1), "], one value per column of ",
           matrix_name, " (", matrix.describe(), ")");
}

}  // namespace

void bias_add(const Tensor& y, const Tensor& bias, Stream& stream) {
  expect_f32("bias_add", "y", y, stream);
  expect_f32("bias_add", "bias", bias, stream);
  expect_bias_shapes("bias_add", "y", y, "bias", bias);
  kernels_for(stream.device()).bias_add(y.f32(), bias.f32(), y.dim(0), y.dim(1), stream);
}

void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, Stream& stream) {
  expect_f32("bias_grad", "dy", dy, stream);
  expect_f32("bias_grad", "dbias", dbias, stream);
  expect_bias_shapes("bias_grad", "dy", dy, "dbias", dbias);
  kernels_for(stream.device())
      .bias_grad(dy.f32(), dbias.f32(), dy.dim(0), dy.dim(1), accumulate, stream);
}

}  // namespace ls
