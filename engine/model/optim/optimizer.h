// Optimizers over a ParameterStore's flat buffers: one fused kernel call per step updates every
// parameter (the flat layout makes the whole model one contiguous array).
// State tensors (momentum, Adam moments) are flat buffers laid out like the parameters, so a
// checkpoint can save them by name and the sharded optimizer can later split them by range.
// The flat buffers are passed in (the replica owns them in its ParameterStore): the optimizer is
// built for a parameter buffer of a given size and steps whatever buffers of that size it is
// handed, so where the gradients come from (the Reducer's all-reduced buffer) reads from the call.
// step() is asynchronous on the given stream; it must be the stream the gradients were made on
// (or one that waits for them).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <lockstep/tensor.h>
#include "ops/optim.h"

namespace ls::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of `params` (the flat parameter buffer) with `grads` (the flat gradients).
  virtual void step(const Tensor& params, const Tensor& grads, Stream& stream) = 0;
  // The same step, leaving `params16` (bf16, as many elements) holding the bf16 rounding of the
  // updated parameters (Note [The bf16 copy of the weights], engine/model/nn/parameter_store.h).
  // This default steps, then rounds in a second pass; Sgd and AdamW write it in their one pass.
  virtual void step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                              Stream& stream);
  virtual std::string name() const = 0;
  // Named state buffers (e.g. {"exp_avg", m}), for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  int64_t steps_taken() const { return steps_; }
  void set_steps_taken(int64_t steps) { steps_ = steps; }
  // Gates every later step() by a StepControl on the device (ops/step_control.h): skipped steps
  // change nothing, gradients are unscaled, and AdamW counts its steps there. steps_taken() then
  // is what the owner last read back from the control (set_steps_taken). Only optimizers whose
  // gated() is true read it; DataParallel steps any other only after the host has read the
  // step's decision (one wait per step, no graphs, no f16 loss scaling).
  virtual void set_step_control(Tensor control) { control_ = std::move(control); }
  virtual bool gated() const { return false; }
  // Hyper-parameters (the learning rate) are arguments of the kernels a step enqueues: a step
  // captured as a graph keeps those it was captured with. Set them before the first step.
  virtual float learning_rate() const = 0;
  virtual void set_learning_rate(float lr) = 0;

 protected:
  int64_t steps_ = 0;
  Tensor control_;  // undefined: ungated
};

class Sgd final : public Optimizer {
 public:
  // State is sized and placed like `params`, zero-initialised on `stream`.
  Sgd(const Tensor& params, const SgdConfig& config, Stream& stream);
  void step(const Tensor& params, const Tensor& grads, Stream& stream) override;
  void step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                      Stream& stream) override;
  std::string name() const override { return "sgd"; }
  bool gated() const override { return true; }
  std::vector<std::pair<std::string, Tensor>> state() const override;
  float learning_rate() const override { return config_.lr; }
  void set_learning_rate(float lr) override { config_.lr = lr; }

 private:
  SgdConfig config_;
  Tensor momentum_;  // undefined when momentum == 0
};

class AdamW final : public Optimizer {
 public:
  // State is sized and placed like `params`, zero-initialised on `stream`.
  AdamW(const Tensor& params, const AdamWConfig& config, Stream& stream);
  void step(const Tensor& params, const Tensor& grads, Stream& stream) override;
  void step_and_round(const Tensor& params, const Tensor& grads, const Tensor& params16,
                      Stream& stream) override;
  std::string name() const override { return "adamw"; }
  bool gated() const override { return true; }
  std::vector<std::pair<std::string, Tensor>> state() const override;
  float learning_rate() const override { return config_.lr; }
  void set_learning_rate(float lr) override { config_.lr = lr; }

 private:
  AdamWConfig config_;
  Tensor exp_avg_;
  Tensor exp_avg_sq_;
};

}  // namespace ls::optim
