// GELU's tanh form for host kernels (ops/host/activation.cpp, ops/host/gemm_epilogue.cpp): one
// definition, so bias + GELU and the GEMM epilogue that replaces it compute the same values.
#pragma once

#include "ops/host/fast_math.h"

namespace ls {

// GELU, tanh form, and its exact derivative, through the logistic function (1 + tanh u = 2
// sigmoid(2u)), which keeps full relative precision where gelu is tiny (x << 0):
//   u = s (x + a x^3), sig = 1 / (1 + e^{-2u}), gelu = x sig,
//   gelu' = sig + 2 x sig (1 - sig) s (1 + 3 a x^2), with 1 - sig = e^{-2u} sig.
// 2u is clamped to [-80, 80], where sig is 0 or 1 to f32 precision, so e^{-2u} stays finite.
constexpr float kGeluS = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;

struct GeluParts {
  float sig, one_minus_sig;
};

inline GeluParts gelu_parts(float x) {
  const float z = 2.0f * kGeluS * (x + kGeluA * x * x * x);
  const float e = host_math::fast_exp_in_range(-(z < -80.0f ? -80.0f : (z > 80.0f ? 80.0f : z)));
  const float sig = 1.0f / (1.0f + e);
  return {sig, e * sig};
}

inline float gelu_value(float x) { return x * gelu_parts(x).sig; }

inline float gelu_grad(float x) {
  const GeluParts g = gelu_parts(x);
  return g.sig + 2.0f * x * g.sig * g.one_minus_sig * kGeluS * (1.0f + 3.0f * kGeluA * x * x);
}

}  // namespace ls
