// The built-in losses (lockstep/nn/loss.h).
#include <lockstep/nn/loss.h>

#include <lockstep/error.h>
#include <lockstep/nn/functional.h>

namespace ls::nn {
namespace {

Tensor as_rows_of(const Tensor& targets, const Var& output) {
  LS_CHECK(targets.numel() == output->value.numel(), "the targets (", targets.describe(),
           ") do not match the model's output (", output->value.describe(),
           "): a value target per output element; set the batch's label_width to the output's "
           "width");
  return targets.reshape(output->value.shape());
}

class CrossEntropyLoss final : public Loss {
 public:
  std::string name() const override { return "cross_entropy"; }
  TargetKind targets() const override { return TargetKind::kClasses; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    LS_CHECK(!tape.recording(), "cross_entropy_loss: its gradient is fused into the engine's step, "
             "so its sum() is for evaluation tapes only; call nn::cross_entropy in a loop of "
             "your own");
    const Tensor labels = targets.reshape({targets.numel()});
    return scale(tape, cross_entropy(tape, output, labels),
                 static_cast<float>(output->value.dim(0)));
  }
};

class MseLoss final : public Loss {
 public:
  std::string name() const override { return "mse"; }
  TargetKind targets() const override { return TargetKind::kValues; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    return squared_error_sum(tape, output, as_rows_of(targets, output));
  }
};

class BceWithLogitsLoss final : public Loss {
 public:
  std::string name() const override { return "bce_with_logits"; }
  TargetKind targets() const override { return TargetKind::kValues; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    return bce_with_logits_sum(tape, output, as_rows_of(targets, output));
  }
};

}  // namespace

std::shared_ptr<const Loss> cross_entropy_loss() {
  static const auto loss = std::make_shared<const CrossEntropyLoss>();
  return loss;
}
std::shared_ptr<const Loss> mse_loss() { return std::make_shared<const MseLoss>(); }
std::shared_ptr<const Loss> bce_with_logits_loss() {
  return std::make_shared<const BceWithLogitsLoss>();
}

bool is_cross_entropy(const Loss& loss) {
  return dynamic_cast<const CrossEntropyLoss*>(&loss) != nullptr;
}

}  // namespace ls::nn
