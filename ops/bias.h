// Bias of a dense layer on 2-D f32 tensors [rows, cols], through the stream's kernel table.
//
// bias_add:  y[r, c] += bias[c]          (in place on y; bias is [cols])
// bias_grad: dbias[c] (+)= sum_r dy[r, c] (rows summed in order: bitwise reproducible)
// Asynchronous in stream order; every tensor must be on the stream's device. Bad arguments raise
// ls::Error at the call.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace ls {

void bias_add(const Tensor& y, const Tensor& bias, Stream& stream);
// accumulate: dbias += sum (gradient accumulation); otherwise dbias = sum.
void bias_grad(const Tensor& dy, const Tensor& dbias, bool accumulate, Stream& stream);

}  // namespace ls
