// Optimizer steps on CUDA, elementwise and in place, with PyTorch's semantics as written in
// ops/optim.h: SGD with L2 weight decay and a momentum buffer that starts at 0; AdamW with
// decoupled weight decay and bias correction for `step` counted from 1, in PyTorch's
// arithmetic (bias corrections in double). Asynchronous on `stream`.
//
// Note [Gated optimizer kernels]
// With a StepControl (ops/step_control.h) the kernels read the step's decision on the device
// when they run: skip != 0 leaves every parameter and state untouched (each thread returns
// before reading anything else), else the gradient is multiplied by inv_scale before use and
// AdamW's step is optimizer_steps. The bias corrections then cannot be computed on the host:
// thread 0 of each block computes them, in double with pow as the host does, into shared memory
// (one pow per block, not per element: cheap beside the block's memory traffic). Device pow is
// within 2 ulp in double, so after rounding to f32 the factors match the host's in all but rare
// ties. The ungated kernels (no control) are separate instantiations, unchanged.
#include <cuda_runtime.h>

#include <cmath>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/optim.h"

namespace ls::cuda_ops {
namespace {

// kGated: see Note [Gated optimizer kernels]; control is null when !kGated.
template <bool kGated>
__global__ void sgd_step_kernel(float* param, const float* grad, float* momentum_buf,
                                uint16_t* param16, int64_t n, float lr, float momentum,
                                float weight_decay, const StepControl* control) {
  float inv_scale = 1.0f;
  if constexpr (kGated) {
    if (control->skip != 0) return;
    inv_scale = control->inv_scale;
  }
  LS_GRID_STRIDE_LOOP(i, n) {
    float g;
    if constexpr (kGated) {
      g = grad[i] * inv_scale + weight_decay * param[i];
    } else {
      g = grad[i] + weight_decay * param[i];
    }
    float p = param[i];
    if (momentum_buf != nullptr) {
      const float buf = momentum * momentum_buf[i] + g;
      momentum_buf[i] = buf;
      p -= lr * buf;
    } else {
      p -= lr * g;
    }
    param[i] = p;
    if (param16 != nullptr) param16[i] = f32_to_bf16_bits(p);
  }
}

// AdamW's two step-dependent factors, in PyTorch's arithmetic: step_size = lr / (1 - b1^step)
// and sqrt(1 - b2^step), both computed in double and rounded to f32 (host: the ungated launch;
// device: the gated kernel).
struct AdamWFactors {
  float step_size;
  float sqrt_bias_correction2;
};

__host__ __device__ inline AdamWFactors adamw_factors(float lr, float beta1, float beta2,
                                                      int64_t step) {
  const double bias_correction1 = 1.0 - pow(static_cast<double>(beta1), static_cast<double>(step));
  const double bias_correction2 = 1.0 - pow(static_cast<double>(beta2), static_cast<double>(step));
  return {static_cast<float>(static_cast<double>(lr) / bias_correction1),
          static_cast<float>(sqrt(bias_correction2))};
}

// PyTorch's form: denom = sqrt(v) / sqrt(1 - b2^step) + eps; p -= (lr / (1 - b1^step)) m / denom,
// after the decoupled decay p *= 1 - lr wd. Ungated: `factors` came from the host. Gated: see
// Note [Gated optimizer kernels] (`factors` is ignored, lr is used).
template <bool kGated>
__global__ void adamw_step_kernel(float* param, const float* grad, float* m, float* v,
                                  uint16_t* param16, int64_t n, float lr, float beta1, float beta2,
                                  float eps, float decay, AdamWFactors factors,
                                  const StepControl* control) {
  float inv_scale = 1.0f;
  if constexpr (kGated) {
    __shared__ AdamWFactors shared_factors;
    if (control->skip != 0) return;  // every thread of the grid sees the same value
    inv_scale = control->inv_scale;
    if (threadIdx.x == 0)
      shared_factors = adamw_factors(lr, beta1, beta2, control->optimizer_steps);
    __syncthreads();
    factors = shared_factors;
  }
  LS_GRID_STRIDE_LOOP(i, n) {
    float g;
    if constexpr (kGated) {
      g = grad[i] * inv_scale;
    } else {
      g = grad[i];
    }
    // Rounded products and sums (_rn intrinsics, never fused into an FMA): nvcc contracts
    // a * b + c by choice, and chose differently in the gated and plain instantiations (their m
    // differed in the last bit on the first GPU run); unfused, both compute what the host does.
    const float m_new = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(1.0f - beta1, g));
    const float v_new =
        __fadd_rn(__fmul_rn(beta2, v[i]), __fmul_rn(__fmul_rn(1.0f - beta2, g), g));
    m[i] = m_new;
    v[i] = v_new;
    const float denom = __fadd_rn(sqrtf(v_new) / factors.sqrt_bias_correction2, eps);
    const float p =
        __fsub_rn(__fmul_rn(param[i], decay), __fmul_rn(factors.step_size, m_new / denom));
    param[i] = p;
    if (param16 != nullptr) param16[i] = f32_to_bf16_bits(p);
  }
}

}  // namespace

void sgd_step(float* param, const float* grad, float* momentum_buf, uint16_t* param16, int64_t n,
              const SgdConfig& config, const StepControl* control, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(config.momentum == 0.0f || momentum_buf != nullptr, "sgd_step: momentum ",
           config.momentum, " needs a momentum buffer");
  if (n == 0) return;
  // With momentum 0 the buffer is neither read nor written, even when one is given.
  float* buf = config.momentum != 0.0f ? momentum_buf : nullptr;
  if (control != nullptr) {
    LS_LAUNCH(sgd_step_kernel<true>, grid_for(n), kThreads, 0, stream, param, grad, buf, param16, n,
              config.lr, config.momentum, config.weight_decay, control);
  } else {
    LS_LAUNCH(sgd_step_kernel<false>, grid_for(n), kThreads, 0, stream, param, grad, buf, param16,
              n, config.lr, config.momentum, config.weight_decay, nullptr);
  }
  LS_CUDA_CHECK_LAUNCH();
}

void adamw_step(float* param, const float* grad, float* m, float* v, uint16_t* param16, int64_t n,
                const AdamWConfig& config, int64_t step, const StepControl* control, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(step >= 1 || control != nullptr, "adamw_step: step is counted from 1, got ", step,
           " (or pass a StepControl, whose optimizer_steps is used)");
  if (n == 0) return;
  const float decay = 1.0f - config.lr * config.weight_decay;
  if (control != nullptr) {
    LS_LAUNCH(adamw_step_kernel<true>, grid_for(n), kThreads, 0, stream, param, grad, m, v, param16,
              n, config.lr, config.beta1, config.beta2, config.eps, decay, AdamWFactors{}, control);
  } else {
    // Bias corrections in double on the host, as PyTorch computes them.
    const AdamWFactors factors = adamw_factors(config.lr, config.beta1, config.beta2, step);
    LS_LAUNCH(adamw_step_kernel<false>, grid_for(n), kThreads, 0, stream, param, grad, m, v,
              param16, n, config.lr, config.beta1, config.beta2, config.eps, decay, factors,
              nullptr);
  }
  LS_CUDA_CHECK_LAUNCH();
}

const OptimOps kCudaOptim{
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};
LS_REGISTER_OP_TABLE(OptimOps, DeviceKind::kCuda, kCudaOptim);

}  // namespace ls::cuda_ops
