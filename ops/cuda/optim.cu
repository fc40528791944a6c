// Optimizer steps on CUDA, elementwise and in place, with PyTorch's semantics as written in
// ops/kernels.h: SGD with L2 weight decay and a momentum buffer that starts at 0; AdamW with
// decoupled weight decay and bias correction for `step` counted from 1. The bias corrections
// are computed once on the host in double precision. Asynchronous on `stream`.
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_launch.h"

namespace ls::cuda_ops {
namespace {

__global__ void sgd_step_kernel(float* param, const float* grad, float* momentum_buf, int64_t n,
                                float lr, float momentum, float weight_decay) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = grad[i] + weight_decay * param[i];
    if (momentum_buf != nullptr) {
      const float buf = momentum * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      param[i] -= lr * buf;
    } else {
      param[i] -= lr * g;
    }
  }
}

__global__ void adamw_step_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                                  float lr, float beta1, float beta2, float eps,
                                  float weight_decay, float bias_correction1,
                                  float bias_correction2) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = grad[i];
    const float p = param[i] * (1.0f - lr * weight_decay);
    const float m_new = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_new = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;
    param[i] = p - lr * (m_new / bias_correction1) / (sqrtf(v_new / bias_correction2) + eps);
  }
}

}  // namespace

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
              const SgdConfig& config, cudaStream_t stream) {
  LS_CHECK(config.momentum == 0.0f || momentum_buf != nullptr,
           "sgd_step: momentum ", config.momentum, " needs a momentum buffer");
  if (n == 0) return;
  // With momentum 0 the buffer is neither read nor written, even when one is given.
  float* buf = config.momentum != 0.0f ? momentum_buf : nullptr;
  sgd_step_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, buf, n, config.lr,
                                                        config.momentum, config.weight_decay);
  LS_CUDA_CHECK_LAUNCH();
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWConfig& config, int64_t step, cudaStream_t stream) {
  LS_CHECK(step >= 1, "adamw_step: step is counted from 1, got ", step);
  if (n == 0) return;
  const auto bias_correction1 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(step)));
  const auto bias_correction2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(step)));
  adamw_step_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      param, grad, m, v, n, config.lr, config.beta1, config.beta2, config.eps,
      config.weight_decay, bias_correction1, bias_correction2);
  LS_CUDA_CHECK_LAUNCH();
}

}  // namespace ls::cuda_ops
