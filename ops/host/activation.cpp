// Host kernels of ops/activation.h: relu, gelu, gelu_erf and tanh, forward and backward. Each
// enqueues one task split over host_parallel_for; every element is computed independently. The
// inner loops are plain indexed loops so the compiler vectorises them (in-place use is allowed).
#include "ops/activation.h"

#include <cmath>

#include "ops/host/fast_math.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

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
  const float e = host_math::fast_exp(-(z < -80.0f ? -80.0f : (z > 80.0f ? 80.0f : z)));
  const float sig = 1.0f / (1.0f + e);
  return {sig, e * sig};
}

inline float gelu_value(float x) { return x * gelu_parts(x).sig; }

inline float gelu_grad(float x) {
  const GeluParts g = gelu_parts(x);
  return g.sig + 2.0f * x * g.sig * g.one_minus_sig * kGeluS * (1.0f + 3.0f * kGeluA * x * x);
}

// GELU, erf form, and its derivative: Phi(x) = 0.5 (1 + erf(x / sqrt 2)), gelu_erf = x Phi(x),
// gelu_erf' = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi).
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;

inline float gelu_erf_value(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }

inline float gelu_erf_grad(float x) {
  return 0.5f * (1.0f + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5f * x * x);
}

void relu(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float v = x[i];
      y[i] = v > 0.0f ? v : 0.0f;
    }
  });
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n,
                                bool accumulate, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) {
        const float g = dy[i];  // loaded unconditionally so the select vectorises
        dx[i] += x[i] > 0.0f ? g : 0.0f;
      }
    } else {
      for (int64_t i = b; i < e; ++i) {
        const float g = dy[i];
        dx[i] = x[i] > 0.0f ? g : 0.0f;
      }
    }
  });
}

LS_VECTOR_CLONES void gelu_range(const float* x, float* y, int64_t b, int64_t e) {
  for (int64_t i = b; i < e; ++i) y[i] = gelu_value(x[i]);
}

LS_VECTOR_CLONES void gelu_backward_range(const float* x, const float* dy, float* dx, int64_t b,
                                          int64_t e, bool accumulate) {
  if (accumulate) {
    for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * gelu_grad(x[i]);
  } else {
    for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_grad(x[i]);
  }
}

void gelu(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) { gelu_range(x, y, b, e); });
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& stream) {
  enqueue_map(stream, n,
              [=](int64_t b, int64_t e) { gelu_backward_range(x, dy, dx, b, e, accumulate); });
}

void gelu_erf(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = gelu_erf_value(x[i]);
  });
}

void gelu_erf_backward(const float* x, const float* dy, float* dx, int64_t n, bool accumulate,
                       Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * gelu_erf_grad(x[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * gelu_erf_grad(x[i]);
    }
  });
}

void tanh_op(const float* x, float* y, int64_t n, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = host_math::fast_tanh(x[i]);
  });
}

void tanh_backward(const float* y, const float* dy, float* dx, int64_t n, bool accumulate,
                   Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    if (accumulate) {
      for (int64_t i = b; i < e; ++i) dx[i] += dy[i] * (1.0f - y[i] * y[i]);
    } else {
      for (int64_t i = b; i < e; ++i) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
    }
  });
}

const ActivationOps kHostActivation{
    .relu = relu,
    .relu_backward = relu_backward,
    .gelu = gelu,
    .gelu_backward = gelu_backward,
    .gelu_erf = gelu_erf,
    .gelu_erf_backward = gelu_erf_backward,
    .tanh = tanh_op,
    .tanh_backward = tanh_backward,
};
LS_REGISTER_OP_TABLE(ActivationOps, DeviceKind::kHost, kHostActivation);

}  // namespace
}  // namespace ls
