// sgd_step / adamw_step: argument and hyper-parameter checks (PyTorch rejects the same values),
// then the stream's kernel table.
#include "ops/optim.h"

#include "engine/core/error.h"

namespace ls {
namespace {

void expect_like(const char* op, const char* name, const Tensor& t, const Tensor& param,
                 const Stream& stream) {
  LS_CHECK(t.defined(), op, ": ", name, " is an undefined Tensor; pass an f32 tensor like param");
  LS_CHECK(t.dtype() == DType::kF32, op, ": ", name, " is ", t.describe(), "; expected dtype f32");
  LS_CHECK(t.device() == stream.device(), op, ": ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
  LS_CHECK(t.numel() == param.numel(), op, ": ", name, " is ", t.describe(), " but param is ",
           param.describe(), "; expected the same number of elements");
}

}  // namespace

void sgd_step(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
              const SgdConfig& config, Stream& stream) {
  expect_like("sgd_step", "param", param, param, stream);
  expect_like("sgd_step", "grad", grad, param, stream);
  LS_CHECK(config.lr >= 0.0f, "sgd_step: lr is ", config.lr, "; it must be >= 0");
  LS_CHECK(config.momentum >= 0.0f, "sgd_step: momentum is ", config.momentum,
           "; it must be >= 0 (0 disables momentum)");
  LS_CHECK(config.weight_decay >= 0.0f, "sgd_step: weight_decay is ", config.weight_decay,
           "; it must be >= 0");
  float* buf = nullptr;
  if (config.momentum != 0.0f) {
    LS_CHECK(momentum_buf.defined(), "sgd_step: momentum is ", config.momentum,
             " but momentum_buf is an undefined Tensor; pass a zero-initialised f32 tensor "
             "like param (",
             param.describe(), ")");
    expect_like("sgd_step", "momentum_buf", momentum_buf, param, stream);
    buf = momentum_buf.f32();
  }
  kernels_for(stream.device())
      .sgd_step(param.f32(), grad.f32(), buf, param.numel(), config, stream);
}

void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                const AdamWConfig& config, int64_t step, Stream& stream) {
  expect_like("adamw_step", "param", param, param, stream);
  expect_like("adamw_step", "grad", grad, param, stream);
  expect_like("adamw_step", "m", m, param, stream);
  expect_like("adamw_step", "v", v, param, stream);
  LS_CHECK(config.lr >= 0.0f, "adamw_step: lr is ", config.lr, "; it must be >= 0");
  LS_CHECK(config.beta1 >= 0.0f && config.beta1 < 1.0f, "adamw_step: beta1 is ", config.beta1,
           "; it must lie in [0, 1)");
  LS_CHECK(config.beta2 >= 0.0f && config.beta2 < 1.0f, "adamw_step: beta2 is ", config.beta2,
           "; it must lie in [0, 1)");
  LS_CHECK(config.eps >= 0.0f, "adamw_step: eps is ", config.eps, "; it must be >= 0");
  LS_CHECK(config.weight_decay >= 0.0f, "adamw_step: weight_decay is ", config.weight_decay,
           "; it must be >= 0");
  LS_CHECK(step >= 1, "adamw_step: step is ", step,
           "; steps are counted from 1 (pass the number of steps taken, including this one)");
  kernels_for(stream.device())
      .adamw_step(param.f32(), grad.f32(), m.f32(), v.f32(), param.numel(), config, step, stream);
}

}  // namespace ls
