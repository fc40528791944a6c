// Host optimizer steps, one fused pass over the parameters (PyTorch semantics, see
// ops/optim.h). Per-element and independent, so the result does not depend on the chunking.
// param, grad and the state buffers must be distinct, non-overlapping buffers.
#include "ops/optim.h"

#include <algorithm>
#include <cmath>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "ops/host/bf16_convert.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// Per-element updates. `unscale` multiplies each gradient first (1 / loss scale; exactly 1.0f
// when there is none, which leaves every product bitwise what it was without it).
void sgd_plain(float* __restrict p, const float* __restrict g, int64_t b, int64_t e, float lr,
               float wd, float unscale) {
  for (int64_t i = b; i < e; ++i) p[i] -= lr * (g[i] * unscale + wd * p[i]);
}

void sgd_momentum(float* __restrict p, const float* __restrict g, float* __restrict buf, int64_t b,
                  int64_t e, float lr, float wd, float momentum, float unscale) {
  for (int64_t i = b; i < e; ++i) {
    const float d = g[i] * unscale + wd * p[i];
    const float v = momentum * buf[i] + d;
    buf[i] = v;
    p[i] -= lr * v;
  }
}

struct AdamWCoefficients {
  float decay;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float step_size;  // lr / (1 - beta1^step)
  float sqrt_bc2;   // sqrt(1 - beta2^step)
  float eps;
  float unscale;  // multiplies the gradient
};

AdamWCoefficients adamw_coefficients(const AdamWConfig& config, int64_t step, float unscale) {
  // Bias corrections in double, as PyTorch computes them on the host.
  const double bc1 = 1.0 - std::pow(static_cast<double>(config.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(step));
  AdamWCoefficients k;
  k.decay = 1.0f - config.lr * config.weight_decay;
  k.beta1 = config.beta1;
  k.one_minus_beta1 = 1.0f - config.beta1;
  k.beta2 = config.beta2;
  k.one_minus_beta2 = 1.0f - config.beta2;
  k.step_size = static_cast<float>(config.lr / bc1);
  k.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  k.eps = config.eps;
  k.unscale = unscale;
  return k;
}

LS_VECTOR_CLONES void adamw_range(float* __restrict p, const float* __restrict g,
                                  float* __restrict m, float* __restrict v, int64_t b, int64_t e,
                                  AdamWCoefficients k) {
  for (int64_t i = b; i < e; ++i) {
    const float gi = g[i] * k.unscale;
    const float mi = k.beta1 * m[i] + k.one_minus_beta1 * gi;
    const float vi = k.beta2 * v[i] + k.one_minus_beta2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    // As PyTorch: denom = sqrt(v) / sqrt(bias_correction2) + eps.
    const float denom = std::sqrt(vi) / k.sqrt_bc2 + k.eps;
    p[i] = p[i] * k.decay - k.step_size * (mi / denom);
  }
}

// Runs update(b, e) over [begin, end); with a bf16 copy (p16 not null), in blocks of 2048
// elements (8 KiB of parameters), each rounded into p16 right after its update, while it is still
// in L1: the copy costs a write, not another pass over the parameters.
template <class Update>
void update_then_round(int64_t begin, int64_t end, const float* p, uint16_t* p16, Update update) {
  if (p16 == nullptr) {
    update(begin, end);
    return;
  }
  constexpr int64_t kBlock = 2048;
  for (int64_t b = begin; b < end; b += kBlock) {
    const int64_t e = std::min(end, b + kBlock);
    update(b, e);
    round_to_bf16(p + b, e - b, p16 + b);
  }
}

// A control's gate, read when the kernel runs: false when the step is skipped.
bool gate_open(const StepControl* control) { return control == nullptr || control->skip == 0; }
float unscale_of(const StepControl* control) {
  return control == nullptr ? 1.0f : control->inv_scale;
}

void sgd_step(float* param, const float* grad, float* momentum_buf, uint16_t* param16, int64_t n,
              const SgdConfig& config, const StepControl* control, Stream& stream) {
  if (n <= 0) return;
  const SgdConfig cfg = config;
  LS_ASSERT(cfg.momentum == 0.0f || momentum_buf != nullptr, "sgd_step with momentum ",
            cfg.momentum, " needs a buffer");
  host_enqueue(stream, [=] {
    if (!gate_open(control)) return;
    const float unscale = unscale_of(control);
    host_parallel_for(0, n, kHostGrain, [=](int64_t begin, int64_t end) {
      update_then_round(begin, end, param, param16, [=](int64_t b, int64_t e) {
        if (cfg.momentum == 0.0f) {
          sgd_plain(param, grad, b, e, cfg.lr, cfg.weight_decay, unscale);
        } else {
          sgd_momentum(param, grad, momentum_buf, b, e, cfg.lr, cfg.weight_decay, cfg.momentum,
                       unscale);
        }
      });
    });
  });
}

void adamw_step(float* param, const float* grad, float* m, float* v, uint16_t* param16, int64_t n,
                const AdamWConfig& config, int64_t step, const StepControl* control,
                Stream& stream) {
  LS_CHECK(step >= 1 || control != nullptr, "adamw_step: step is ", step,
           "; steps are counted from 1");
  if (n <= 0) return;
  const AdamWConfig cfg = config;
  host_enqueue(stream, [=] {
    if (!gate_open(control)) return;
    const int64_t t = control != nullptr ? control->optimizer_steps : step;
    const AdamWCoefficients k = adamw_coefficients(cfg, t, unscale_of(control));
    host_parallel_for(0, n, kHostGrain, [=](int64_t begin, int64_t end) {
      update_then_round(begin, end, param, param16,
                        [=](int64_t b, int64_t e) { adamw_range(param, grad, m, v, b, e, k); });
    });
  });
}

const OptimOps kHostOptim{
    .sgd_step = sgd_step,
    .adamw_step = adamw_step,
};
LS_REGISTER_OP_TABLE(OptimOps, DeviceKind::kHost, kHostOptim);

}  // namespace
}  // namespace ls
