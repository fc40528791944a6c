// Optimizer steps on CUDA, elementwise and in place, with PyTorch's semantics as written in
// ops/optim.h: SGD with L2 weight decay and a momentum buffer that starts at 0; AdamW with
// decoupled weight decay and bias correction for `step` counted from 1, in PyTorch's
// arithmetic (bias corrections in double on the host). Asynchronous on `stream`.
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/cuda_launch.h"
#include "ops/optim.h"

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

// PyTorch's form: denom = sqrt(v) / sqrt(1 - b2^step) + eps; p -= (lr / (1 - b1^step)) m / denom,
// after the decoupled decay p *= 1 - lr wd.
__global__ void adamw_step_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                                  float beta1, float beta2, float eps, float decay, float step_size,
                                  float sqrt_bias_correction2) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const float g = grad[i];
    const float m_new = beta1 * m[i] + (1.0f - beta1) * g;
    const float v_new = beta2 * v[i] + (1.0f - beta2) * g * g;
    m[i] = m_new;
    v[i] = v_new;
    const float denom = sqrtf(v_new) / sqrt_bias_correction2 + eps;
    param[i] = param[i] * decay - step_size * (m_new / denom);
  }
}

}  // namespace

void sgd_step(float* param, const float* grad, float* momentum_buf, int64_t n,
              const SgdConfig& config, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(config.momentum == 0.0f || momentum_buf != nullptr, "sgd_step: momentum ",
           config.momentum, " needs a momentum buffer");
  if (n == 0) return;
  // With momentum 0 the buffer is neither read nor written, even when one is given.
  float* buf = config.momentum != 0.0f ? momentum_buf : nullptr;
  sgd_step_kernel<<<grid_for(n), kThreads, 0, stream>>>(param, grad, buf, n, config.lr,
                                                        config.momentum, config.weight_decay);
  LS_CUDA_CHECK_LAUNCH();
}

void adamw_step(float* param, const float* grad, float* m, float* v, int64_t n,
                const AdamWConfig& config, int64_t step, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(step >= 1, "adamw_step: step is counted from 1, got ", step);
  if (n == 0) return;
  // Bias corrections in double on the host, as PyTorch computes them.
  const double bias_correction1 =
      1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(step));
  const double bias_correction2 =
      1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(step));
  adamw_step_kernel<<<grid_for(n), kThreads, 0, stream>>>(
      param, grad, m, v, n, config.beta1, config.beta2, config.eps,
      1.0f - config.lr * config.weight_decay, static_cast<float>(config.lr / bias_correction1),
      static_cast<float>(std::sqrt(bias_correction2)));
  LS_CUDA_CHECK_LAUNCH();
}


const OptimOps kCudaOptim{
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};
LS_REGISTER_OP_TABLE(OptimOps, DeviceKind::kCuda, kCudaOptim);

}  // namespace ls::cuda_ops
