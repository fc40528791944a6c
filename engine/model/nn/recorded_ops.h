// The recording halves of nn::add and nn::layernorm: given the values a kernel computed, the
// output Var with its backward. Split from the computing halves so that one kernel may compute
// what two ops record (nn::add_layernorm: the residual add and the norm that reads it, in one pass,
// with backward unchanged).
#pragma once

#include <lockstep/nn/autograd.h>

namespace ls::nn {

// y = a + b, computed: the Var with add's backward (the gradient handed to a, rounded for b
// where b's op multiplies it in bf16).
Var record_add(Tape& tape, Tensor y, const Var& a, const Var& b);

// What a LayerNorm kernel wrote: y (f32, or undefined when only y16 is kept), y16 (bf16 copy, or
// undefined), and the row statistics backward reads.
struct LayerNormOutput {
  Tensor y, y16, mean, rstd;
};
// The LayerNorm of x, computed: the Var with layernorm's backward.
Var record_layernorm(Tape& tape, const Var& x, const Var& gamma, const Var& beta,
                     LayerNormOutput computed);

}  // namespace ls::nn
