// Fault injection for the failure tests and the fault soak, from outside the engine: a faulting
// Module wrapped around the model (throw in forward or backward, stall in forward, NaN input), a
// faulting Optimizer wrapped around the replica's optimizer (throw in its step) and a faulting
// Communicator wrapped around a replica's communicator through EngineHooks (skip the step's
// loss all-reduce, shorten its first gradient bucket's all-reduce by one element). The engine's
// step path knows nothing of them. Steps count from 1, with accumulate = 1; a fault applies to
// every wrapper it is given to and fires only in the one its kind belongs to.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/module.h>
#include "engine/model/optim/optimizer.h"
#include "ops/elementwise.h"
#include <lockstep/data_parallel.h>
#include "parallel/data_parallel/engine_hooks.h"

namespace ls::testing {

struct Fault {
  enum class Kind {
    kThrowInForward,    // an exception from the replica's forward pass
    kThrowInBackward,   // ... from its backward pass
    kThrowInOptimizer,  // ... from its optimizer's step
    kSkipCollective,    // the replica does not issue the step's last collective (the loss sum)
    kWrongCount,        // it issues its first gradient bucket's collective one element short
    kStall,             // it sleeps in forward for `stall` (a replica stuck in user code)
    kNaN,               // its input batch is all NaN
  };
  Kind kind = Kind::kThrowInForward;
  int replica = 0;
  int64_t step = 1;  // 1-based
  std::chrono::milliseconds stall{0};
};

// Faults that live in host code (the model's forward and backward, the optimizer's step) happen
// only in steps that run that code: eager ones, and the step a graph is captured from. A graph
// launch does the device work without it (engine/core/graph.h), so a run that injects them at a
// later step turns graphs off. Communicator faults fire in graph launches too: the host backend
// makes a graph's collectives again through the whole communicator chain at each launch.
inline bool needs_eager_steps(Fault::Kind kind) {
  return kind != Fault::Kind::kSkipCollective && kind != Fault::Kind::kWrongCount;
}

// The model, with the fault applied on its replica's forward call number `step`.
class FaultingModule final : public nn::Module {
 public:
  FaultingModule(std::unique_ptr<nn::Module> inner, Fault fault, int replica)
      : inner_(register_module("inner", std::move(inner))), fault_(fault), replica_(replica) {}

  Var forward(Tape& tape, const Var& input) override {
    const bool here = replica_ == fault_.replica && ++calls_ == fault_.step;
    if (here && fault_.kind == Fault::Kind::kThrowInForward) {
      LS_THROW("injected fault: exception in forward");
    }
    if (here && fault_.kind == Fault::Kind::kStall) std::this_thread::sleep_for(fault_.stall);
    if (here && fault_.kind == Fault::Kind::kNaN) {
      fill(input->value, std::numeric_limits<float>::quiet_NaN(), tape.stream());
    }
    Var out = inner_.forward(tape, input);
    if (!(here && fault_.kind == Fault::Kind::kThrowInBackward)) return out;
    Var wrapped = tape.output(out->value, {&out});
    tape.record(wrapped, {out},
                [](const Tensor&) { LS_THROW("injected fault: exception in backward"); });
    return wrapped;
  }

 private:
  nn::Module& inner_;
  Fault fault_;
  int replica_;
  int64_t calls_ = 0;
};

inline ModelFactory with_fault(ModelFactory model, Fault fault) {
  return [model, fault] {
    return std::make_unique<FaultingModule>(model(), fault, current_replica());
  };
}

// The optimizer, throwing on its replica's optimizer step number `step` (steps the engine skipped
// for non-finite gradients do not call the optimizer, so do not count).
class FaultingOptimizer final : public optim::Optimizer {
 public:
  FaultingOptimizer(std::unique_ptr<optim::Optimizer> inner, Fault fault, int replica)
      : inner_(std::move(inner)), fault_(fault), replica_(replica) {
    steps_ = inner_->steps_taken();
  }

  void step(const Tensor& params, const Tensor& grads, Stream& stream) override {
    if (fault_.kind == Fault::Kind::kThrowInOptimizer && replica_ == fault_.replica &&
        steps_ + 1 == fault_.step) {
      LS_THROW("injected fault: exception in optimizer");
    }
    // steps_taken() is not virtual: a checkpoint load sets this object's count, and the inner
    // optimizer's update (AdamW's bias correction) must see it.
    inner_->set_steps_taken(steps_);
    inner_->step(params, grads, stream);
    steps_ = inner_->steps_taken();
  }
  void set_step_control(Tensor control) override { inner_->set_step_control(std::move(control)); }
  bool gated() const override { return inner_->gated(); }
  std::string name() const override { return inner_->name(); }
  std::vector<std::pair<std::string, Tensor>> state() const override { return inner_->state(); }
  float learning_rate() const override { return inner_->learning_rate(); }
  void set_learning_rate(float lr) override { inner_->set_learning_rate(lr); }

 private:
  std::unique_ptr<optim::Optimizer> inner_;
  Fault fault_;
  int replica_;
};

inline OptimizerFactory with_fault(OptimizerFactory optimizer, Fault fault) {
  return [optimizer, fault](const Tensor& params, Stream& stream) {
    return std::unique_ptr<optim::Optimizer>(
        new FaultingOptimizer(optimizer(params, stream), fault, current_replica()));
  };
}

// Passes every call on, except the faulty one. The step is told by the loss all-reduce (labelled
// "loss", or under ZeRO-2 "loss and non-finite count"); the bucket shortened is the first
// collective labelled "bucket ..." (an all-reduce, or under ZeRO-2 a reduce to its owner).
class FaultingCommunicator final : public CommunicatorDecorator {
 public:
  FaultingCommunicator(std::unique_ptr<Communicator> inner, Fault fault)
      : CommunicatorDecorator(std::move(inner)), fault_(fault) {}
  void label_next(std::string label) override {
    next_label_ = label;
    CommunicatorDecorator::label_next(std::move(label));
  }

 protected:
  void issue(CollectiveDesc desc, Stream& stream) override {
    // Labels travel down the chain by label_next, not in desc (the recorder attaches them).
    const std::string label = std::move(next_label_);
    next_label_.clear();
    const bool loss = desc.kind == CollectiveKind::kAllReduce && label.rfind("loss", 0) == 0;
    const bool bucket = label.rfind("bucket ", 0) == 0;
    const bool here = rank() == fault_.replica && losses_ + 1 == fault_.step;
    if (loss) ++losses_;
    if (here && loss && fault_.kind == Fault::Kind::kSkipCollective) return;  // never issued
    if (here && bucket && fault_.kind == Fault::Kind::kWrongCount && !shortened_) {
      shortened_ = true;
      --desc.count;
    }
    CommunicatorDecorator::issue(desc, stream);
  }

 private:
  Fault fault_;
  std::string next_label_;
  int64_t losses_ = 0;
  bool shortened_ = false;
};

inline EngineHooks with_fault(Fault fault) {
  EngineHooks hooks;
  hooks.wrap_communicator = [fault](std::unique_ptr<Communicator> inner, int) {
    return std::unique_ptr<Communicator>(new FaultingCommunicator(std::move(inner), fault));
  };
  return hooks;
}

}  // namespace ls::testing
