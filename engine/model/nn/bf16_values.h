// Helpers of the differentiable functions for bf16 steps (functional.cpp, mlp.cpp, attention.cpp):
// where a Var's bf16 value comes from, and when an op may hand a Var its gradient already rounded.
#pragma once

#include <lockstep/nn/autograd.h>
#include <lockstep/nn/parameter.h>
#include "ops/elementwise.h"

namespace ls::nn {

// v's value in bf16: itself when stored so, the copy its producer wrote (VarNode::value16), the
// engine's bf16 copy of a parameter (Note [The bf16 copy of the weights]), else a cast of it.
inline Tensor bf16_value_of(const Var& v, Stream& stream) {
  if (v->value.dtype() == DType::kBF16) return v->value;
  if (v->value16.defined()) return v->value16;
  if (v->parameter != nullptr && v->parameter->value16.defined()) return v->parameter->value16;
  return cast_to_bf16(v->value, stream);
}

// v is an intermediate with no gradient yet: its first contribution may be a buffer handed over
// (parameters keep their own storage, and so do Vars given storage by the tape).
inline bool takes_handed_gradient(const VarNode& v) {
  return !v.grad.defined() && v.grad_storage == nullptr && v.parameter == nullptr;
}

// ... and one that may take it rounded to bf16: its only use is the op handing it over, and the
// op that made it multiplies its gradient in bf16 only (VarNode::bf16_grad_ok).
inline bool takes_bf16_gradient(const VarNode& v) {
  return takes_handed_gradient(v) && v.bf16_grad_ok && v.uses == 1;
}

}  // namespace ls::nn
