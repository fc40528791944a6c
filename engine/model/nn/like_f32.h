// An uninitialised f32 tensor of t's shape on t's device: the output or gradient buffer of the
// differentiable functions (functional.cpp, sequence_ops.cpp, attention.cpp).
#pragma once

#include <lockstep/tensor.h>

namespace ls::nn {

inline Tensor like_f32(const Tensor& t) {
  return Tensor::empty(t.shape(), DType::kF32, t.device());
}

}  // namespace ls::nn
