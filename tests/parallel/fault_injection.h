// Fault injection for the failure tests, from outside the engine: a faulting Module wrapped
// around the model (throw in forward or backward, stall in forward, NaN input) and a faulting
// Communicator wrapped around a replica's communicator through EngineHooks (skip the step's
// loss all-reduce, shorten its first gradient bucket's all-reduce by one element). The engine's
// step path knows nothing of them. Steps count from 1, with accumulate = 1.
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <thread>

#include "engine/core/error.h"
#include "engine/model/autograd.h"
#include "engine/model/nn/module.h"
#include "ops/elementwise.h"
#include "parallel/data_parallel.h"
#include "parallel/engine_hooks.h"

namespace ls::testing {

struct Fault {
  enum class Kind {
    kThrowInForward,   // an exception from the replica's forward pass
    kThrowInBackward,  // ... from its backward pass
    kSkipCollective,   // the replica does not issue the step's last collective (the loss sum)
    kWrongCount,       // it issues its first gradient bucket's all-reduce one element short
    kStall,            // it sleeps in forward for `stall` (a replica stuck in user code)
    kNaN,              // its input batch is all NaN
  };
  Kind kind = Kind::kThrowInForward;
  int replica = 0;
  int64_t step = 1;  // 1-based
  std::chrono::milliseconds stall{0};
};

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

// Passes every call on, except the faulty one. The step is told by the loss all-reduce, the
// only one-element all-reduce of a step (the tests' models have more parameters than that).
class FaultingCommunicator final : public CommunicatorDecorator {
 public:
  FaultingCommunicator(std::unique_ptr<Communicator> inner, Fault fault)
      : CommunicatorDecorator(std::move(inner)), fault_(fault) {}

 protected:
  void issue(CollectiveDesc desc, Stream& stream) override {
    const bool all_reduce = desc.kind == CollectiveKind::kAllReduce;
    const bool loss = all_reduce && desc.count == 1;
    const bool here = rank() == fault_.replica && losses_ + 1 == fault_.step;
    if (loss) ++losses_;
    if (here && loss && fault_.kind == Fault::Kind::kSkipCollective) return;  // never issued
    if (here && all_reduce && !loss && fault_.kind == Fault::Kind::kWrongCount && !shortened_) {
      shortened_ = true;
      --desc.count;
    }
    CommunicatorDecorator::issue(desc, stream);
  }

 private:
  Fault fault_;
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
