// Differentiable functions on Vars: each computes its output on the tape's stream and records
// its backward. Shapes: activations are [rows, features] (row-major), as the ops expect.
// The transformer's functions (embedding, layernorm, attention, residual add) will join these
// with the same pattern: compute, tape.output(), tape.record(backward).
#pragma once

#include "engine/model/autograd.h"

namespace ls::nn {

// y = x W^T + b, W [out, in] (PyTorch's layout), b [out] or null.
Var linear(Tape& tape, const Var& x, const Var& weight, const Var* bias);
Var relu(Tape& tape, const Var& x);
Var gelu(Tape& tape, const Var& x);  // tanh form
Var tanh(Tape& tape, const Var& x);
// out = a + b, same shapes (residual connections).
Var add(Tape& tape, const Var& a, const Var& b);

// Mean softmax cross-entropy over rows; labels i32 [rows]. The gradient of the logits is
// computed in the same pass and scaled by grad_scale (1/rows for a mean; the data-parallel code
// passes its own scale for uneven shards). The result must be the root of backward().
// A defined `device_scale` (f32 [1], read on the device when the kernel runs) multiplies the
// gradient too: the data-parallel step's loss scale / global label count (ops/step_control.h).
Var cross_entropy(Tape& tape, const Var& logits, const Tensor& labels, float grad_scale,
                  const Tensor& device_scale = Tensor());
inline Var cross_entropy(Tape& tape, const Var& logits, const Tensor& labels) {
  return cross_entropy(tape, logits, labels, 1.0f / static_cast<float>(logits->value.dim(0)));
}

}  // namespace ls::nn
