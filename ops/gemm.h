// Matrix multiply on 2-D f32 tensors (row-major, contiguous), through the stream's kernel table.
//
// matmul: C = alpha * op(A) op(B) + beta * C, op(X) = X or X^T as trans_x says; op(a) must be
// [m, k], op(b) [k, n] and c [m, n]. beta == 0 overwrites C (NaN in C does not propagate).
// c must not overlap a or b. Asynchronous in stream order; every tensor must be on the stream's
// device. Bad arguments raise ls::Error at the call, naming the argument and its shape.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace ls {

void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
            float alpha, float beta, Stream& stream);

}  // namespace ls
