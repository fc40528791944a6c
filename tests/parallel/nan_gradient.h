// A test layer for the sharded modes' skip tests: it hands one replica a NaN gradient.
#pragma once

#include <limits>

#include <lockstep/data_parallel.h>
#include <lockstep/nn/module.h>
#include "ops/elementwise.h"

namespace ls::testing {

// Identity in forward; in backward it hands its input a NaN gradient on `replica` at forward
// number `step`: the loss stays finite and only the parameters before it get NaN gradients.
class NaNGradientOn final : public nn::Module {
 public:
  NaNGradientOn(int replica, int step) : poison_(current_replica() == replica), step_(step) {}
  Var forward(Tape& tape, const Var& input) override {
    const bool poison = poison_ && tape.recording() && ++calls_ == step_;
    Var out = tape.output(input->value, {&input});
    Stream& stream = tape.stream();
    tape.record(out, {input}, [input, poison, &stream](const Tensor& dy) {
      Tape::begin_grad(*input);  // an intermediate: its first (and only) contribution writes
      input->grad.copy_from(dy, stream);
      if (poison) fill(input->grad, std::numeric_limits<float>::quiet_NaN(), stream);
    });
    return out;
  }

 private:
  bool poison_;
  int step_;
  int calls_ = 0;
};

}  // namespace ls::testing
