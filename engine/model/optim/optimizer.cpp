// SGD and AdamW over flat buffers (see engine/model/optim/optimizer.h).
#include "engine/model/optim/optimizer.h"

#include <cmath>

#include "engine/core/error.h"
#include "ops/elementwise.h"
#include "ops/optim.h"

namespace ls::optim {
namespace {
Tensor zeros_like(const Tensor& t, Stream& stream) {
  Tensor z = Tensor::empty(t.shape(), t.dtype(), t.device());
  fill(z, 0.0f, stream);
  return z;
}
void check_hyper(bool ok, const char* what, float value, const char* expected) {
  LS_CHECK(ok && std::isfinite(value), "optimizer: ", what, " = ", value, " is invalid; expected ",
           expected);
}
}  // namespace

Sgd::Sgd(nn::ParameterStore& store, const SgdConfig& config, Stream& stream)
    : store_(store), config_(config) {
  check_hyper(config.lr > 0, "lr", config.lr, "> 0");
  check_hyper(config.momentum >= 0 && config.momentum < 1, "momentum", config.momentum, "in [0, 1)");
  check_hyper(config.weight_decay >= 0, "weight_decay", config.weight_decay, ">= 0");
  if (config.momentum > 0) momentum_ = zeros_like(store.values(), stream);
}

void Sgd::step(Stream& stream) {
  sgd_step(store_.values(), store_.grads(), momentum_, config_, stream);
  ++steps_;
}

std::vector<std::pair<std::string, Tensor>> Sgd::state() const {
  if (!momentum_.defined()) return {};
  return {{"momentum_buffer", momentum_}};
}

AdamW::AdamW(nn::ParameterStore& store, const AdamWConfig& config, Stream& stream)
    : store_(store), config_(config) {
  check_hyper(config.lr > 0, "lr", config.lr, "> 0");
  check_hyper(config.beta1 >= 0 && config.beta1 < 1, "beta1", config.beta1, "in [0, 1)");
  check_hyper(config.beta2 >= 0 && config.beta2 < 1, "beta2", config.beta2, "in [0, 1)");
  check_hyper(config.eps > 0, "eps", config.eps, "> 0");
  check_hyper(config.weight_decay >= 0, "weight_decay", config.weight_decay, ">= 0");
  exp_avg_ = zeros_like(store.values(), stream);
  exp_avg_sq_ = zeros_like(store.values(), stream);
}

void AdamW::step(Stream& stream) {
  ++steps_;
  adamw_step(store_.values(), store_.grads(), exp_avg_, exp_avg_sq_, config_, steps_, stream);
}

std::vector<std::pair<std::string, Tensor>> AdamW::state() const {
  return {{"exp_avg", exp_avg_}, {"exp_avg_sq", exp_avg_sq_}};
}

}  // namespace ls::optim
