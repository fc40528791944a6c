// SGD and AdamW over flat buffers (see engine/model/optim/optimizer.h).
#include "engine/model/optim/optimizer.h"

#include <lockstep/error.h>
#include "ops/elementwise.h"
#include "ops/optim.h"

namespace ls::optim {
namespace {
Tensor zeros_like(const Tensor& t, Stream& stream) {
  Tensor z = Tensor::empty(t.shape(), t.dtype(), t.device());
  fill(z, 0.0f, stream);
  return z;
}
}  // namespace

void Optimizer::step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                               Stream& stream) {
  step(params, grads, stream);
  if (params16.defined()) cast(params, params16, stream);
}

Sgd::Sgd(const Tensor& params, const SgdConfig& config, Stream& stream) : config_(config) {
  check_config("optimizer sgd", config);  // the rules of ops/optim.h, checked up front
  if (config.momentum > 0) momentum_ = zeros_like(params, stream);
}

void Sgd::step(const Tensor& params, const Tensor& grads, Stream& stream) {
  step_and_round(params, grads, Tensor(), stream);
}

void Sgd::step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                         Stream& stream) {
  sgd_step(params, grads, momentum_, config_, stream, control_, params16);
  if (!control_.defined()) ++steps_;  // gated: counted on the device
}

std::vector<std::pair<std::string, Tensor>> Sgd::state() const {
  if (!momentum_.defined()) return {};
  return {{"momentum_buffer", momentum_}};
}

AdamW::AdamW(const Tensor& params, const AdamWConfig& config, Stream& stream) : config_(config) {
  check_config("optimizer adamw", config);
  exp_avg_ = zeros_like(params, stream);
  exp_avg_sq_ = zeros_like(params, stream);
}

void AdamW::step(const Tensor& params, const Tensor& grads, Stream& stream) {
  step_and_round(params, grads, Tensor(), stream);
}

void AdamW::step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                           Stream& stream) {
  if (!control_.defined()) ++steps_;  // gated: counted on the device
  adamw_step(params, grads, exp_avg_, exp_avg_sq_, config_, steps_, stream, control_, params16);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

}  // namespace ls::optim
