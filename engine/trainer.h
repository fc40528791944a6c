// Trainer: one model, one device, one stream: the training step and the evaluation loop.
//
// A step uploads the batch into preallocated device tensors, zeroes the flat gradient buffer,
// runs forward, the fused loss and backward on a tape, steps the optimizer and reads the loss
// back (the only synchronization of the step). After the first step, a step allocates nothing
// from the system: every tensor comes from the caching allocator's free lists.
// The data-parallel engine (parallel/) runs this same step on every replica and adds the
// gradient all-reduce between backward and the optimizer.
// Thread-safety: a Trainer belongs to one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "engine/data/dataset.h"
#include "engine/data/sampler.h"
#include "engine/nn/module.h"
#include "engine/nn/parameter_store.h"
#include "engine/optim/optimizer.h"

namespace ls {

struct OptimizerSpec {
  std::string kind = "adamw";  // "adamw" or "sgd"
  float lr = 1e-3f;
  float momentum = 0.0f;       // sgd
  float weight_decay = 0.01f;  // adamw: decoupled; sgd: L2
};

std::unique_ptr<optim::Optimizer> make_optimizer(const OptimizerSpec& spec,
                                                 nn::ParameterStore& store, Stream& stream);

struct StepResult {
  float loss = 0.0f;
};

struct EvalResult {
  double loss = 0.0;      // mean over examples
  double accuracy = 0.0;  // fraction of examples whose argmax is the label
  int64_t examples = 0;
};

class Trainer {
 public:
  Trainer(std::unique_ptr<nn::Module> model, const OptimizerSpec& optimizer, Device device,
          uint64_t seed);

  StepResult step(const data::Batch& batch);
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size);

  nn::Module& model() { return *model_; }
  nn::ParameterStore& store() { return *store_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  Stream& stream() { return *stream_; }
  Device device() const { return device_; }

 private:
  void upload(const data::Batch& batch);

  Device device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  Tensor images_;  // device copy of the current batch, reused while the batch size is the same
  Tensor labels_;
  float loss_host_ = 0.0f;
};

}  // namespace ls
