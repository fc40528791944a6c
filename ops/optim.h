// One optimizer step over f32 tensors, fused into one pass, with PyTorch's semantics, and the
// optimizers' hyper-parameters with their one set of rules.
//
// sgd_step:   g = grad + wd * p; buf = momentum * buf + g (buf starts at 0); p -= lr * buf
//             (momentum == 0: no buffer, p -= lr * g). L2 weight decay, as torch.optim.SGD.
// adamw_step: step counted from 1; p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//             p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps), as torch.optim.AdamW.
// param, grad and the state tensors have the same element count and do not overlap; the state
// (momentum_buf, m, v) starts at zero.
// Gated by a StepControl (ops/step_control.h; pass one as `control`): when control->skip is set
// nothing changes; else the gradients are multiplied by control->inv_scale first (undoing the
// loss scale) and AdamW takes control->optimizer_steps as its step (step_decide counted it).
// The host never has to know either value: the step runs the same in an eager step or a graph.
// param16 (optional, bf16, as many elements as param): the step also writes f32_to_bf16 of every
// updated parameter there, in the same pass (the bf16 copy of the weights that bf16 products
// multiply with, rounded once per step instead of in every product). A skipped step leaves it as
// it was, like the parameters. Asynchronous in stream order; bad arguments or hyper-parameters
// raise ls::Error at the call. Kernels: ops/host/optim.cpp, ops/cuda/optim.cu.
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>

#include <lockstep/error.h>
#include "ops/op_check.h"
#include "ops/op_table.h"
#include "ops/step_control.h"

namespace ls {

struct SgdConfig {
  float lr = 0.01f;
  float momentum = 0.0f;      // 0 disables the momentum buffer
  float weight_decay = 0.0f;  // L2 penalty added to the gradient (PyTorch SGD semantics)
};

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;  // decoupled: p *= 1 - lr * weight_decay (PyTorch AdamW semantics)
};

// The rules (PyTorch's): every value finite; lr, momentum, weight_decay, eps >= 0; betas in
// [0, 1). `who` names the caller in the message ("sgd_step", "optimizer sgd").
namespace detail {
inline void check_hyper(const char* who, const char* name, float value, bool ok,
                        const char* rule) {
  LS_CHECK(ok && std::isfinite(value), who, ": ", name, " is ", value, "; it must be ", rule);
}
}  // namespace detail

inline void check_config(const char* who, const SgdConfig& config) {
  detail::check_hyper(who, "lr", config.lr, config.lr >= 0.0f, ">= 0");
  detail::check_hyper(who, "momentum", config.momentum, config.momentum >= 0.0f,
                      ">= 0 (0 disables momentum)");
  detail::check_hyper(who, "weight_decay", config.weight_decay, config.weight_decay >= 0.0f,
                      ">= 0");
}

inline void check_config(const char* who, const AdamWConfig& config) {
  detail::check_hyper(who, "lr", config.lr, config.lr >= 0.0f, ">= 0");
  detail::check_hyper(who, "beta1", config.beta1, config.beta1 >= 0.0f && config.beta1 < 1.0f,
                      "in [0, 1)");
  detail::check_hyper(who, "beta2", config.beta2, config.beta2 >= 0.0f && config.beta2 < 1.0f,
                      "in [0, 1)");
  detail::check_hyper(who, "eps", config.eps, config.eps >= 0.0f, ">= 0");
  detail::check_hyper(who, "weight_decay", config.weight_decay, config.weight_decay >= 0.0f,
                      ">= 0");
}

struct OptimOps {
  // The SGD step above over n elements; momentum_buf is null when config.momentum == 0;
  // control (may be null: ungated) gates and unscales it; param16 (may be null) gets the bf16
  // rounding of the updated parameters.
  void (*sgd_step)(float* param, const float* grad, float* momentum_buf, uint16_t* param16,
                   int64_t n, const SgdConfig& config, const StepControl* control,
                   Stream& stream) = nullptr;
  // The AdamW step above over n elements; step >= 1, or, with a control (may be null), the
  // control's optimizer_steps at the time the kernel runs.
  void (*adamw_step)(float* param, const float* grad, float* m, float* v, uint16_t* param16,
                     int64_t n, const AdamWConfig& config, int64_t step, const StepControl* control,
                     Stream& stream) = nullptr;
};

namespace detail {
inline const StepControl* optional_step_control(const char* op, const Tensor& control,
                                                const Stream& stream) {
  return control.defined() ? step_control_of(op, control, stream) : nullptr;
}
inline uint16_t* optional_bf16_copy(const char* op, const Tensor& param16, const Tensor& param,
                                    const Stream& stream) {
  if (!param16.defined()) return nullptr;
  op_check::tensor(op, "param16", param16, DType::kBF16, stream);
  op_check::same_numel(op, "param16", param16, "param", param);
  return param16.bf16();
}
}  // namespace detail

// momentum_buf may be undefined when config.momentum == 0 (it is then ignored); control and
// param16 may be undefined (ungated; no bf16 copy).
inline void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                     const SgdConfig& config, Stream& stream, const Tensor& control = Tensor(),
                     const Tensor& param16 = Tensor()) {
  op_check::tensor("sgd_step", "param", param, DType::kF32, stream);
  op_check::tensor("sgd_step", "grad", grad, DType::kF32, stream);
  op_check::same_numel("sgd_step", "grad", grad, "param", param);
  check_config("sgd_step", config);
  float* buf = nullptr;
  if (config.momentum != 0.0f) {
    op_check::tensor("sgd_step", "momentum_buf", momentum_buf, DType::kF32, stream);
    op_check::same_numel("sgd_step", "momentum_buf", momentum_buf, "param", param);
    buf = momentum_buf.f32();
  }
  op_entry(
      &OptimOps::sgd_step, "sgd_step", stream,
      [&] {
        return OpLaunches{ledger::moves(
            "sgd_step_kernel", {&param, &param, &grad, &momentum_buf, &momentum_buf, &param16})};
      })(param.f32(), grad.f32(), buf,
         detail::optional_bf16_copy("sgd_step", param16, param, stream), param.numel(), config,
         detail::optional_step_control("sgd_step", control, stream), stream);
}

// step counts from 1 (the first step is 1), as PyTorch's bias correction does; with a control
// (defined), the control's count is used and `step` is ignored.
inline void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                       const AdamWConfig& config, int64_t step, Stream& stream,
                       const Tensor& control = Tensor(), const Tensor& param16 = Tensor()) {
  op_check::tensor("adamw_step", "param", param, DType::kF32, stream);
  for (auto [name, t] : {std::pair{"grad", &grad}, {"m", &m}, {"v", &v}}) {
    op_check::tensor("adamw_step", name, *t, DType::kF32, stream);
    op_check::same_numel("adamw_step", name, *t, "param", param);
  }
  check_config("adamw_step", config);
  LS_CHECK(step >= 1 || control.defined(), "adamw_step: step is ", step,
           "; steps are counted from 1 (pass the number of steps taken, including this one)");
  op_entry(&OptimOps::adamw_step, "adamw_step", stream,
           [&] {
             return OpLaunches{ledger::moves("adamw_step_kernel",
                                             {&param, &param, &grad, &m, &m, &v, &v, &param16})};
           })(param.f32(), grad.f32(), m.f32(), v.f32(),
              detail::optional_bf16_copy("adamw_step", param16, param, stream), param.numel(),
              config, step, detail::optional_step_control("adamw_step", control, stream), stream);
}

}  // namespace ls
