// Activations on f32 tensors of equal element count (shapes may differ), through the stream's
// kernel table. An output may be the same tensor as an input (in place), never a partial overlap.
//
// relu(x) = max(x, 0); relu_backward: dx (+)= dy * (x > 0).
// gelu: tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); gelu_backward uses its exact
// derivative. `accumulate` adds into dx instead of overwriting it. Asynchronous in stream order.
#pragma once

#include "engine/core/stream.h"
#include "engine/core/tensor.h"

namespace ls {

void relu(const Tensor& x, const Tensor& y, Stream& stream);
void relu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                   Stream& stream);
void gelu(const Tensor& x, const Tensor& y, Stream& stream);
void gelu_backward(const Tensor& x, const Tensor& dy, const Tensor& dx, bool accumulate,
                   Stream& stream);

}  // namespace ls
