// The built-in losses (lockstep/nn/loss.h).
#include <lockstep/nn/loss.h>

#include <utility>

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

// A sum over value targets of a pointwise function of output and target (mse, BCE with logits).
class PointwiseValueLoss final : public Loss {
 public:
  using SumFunction = Var (*)(Tape&, const Var&, const Tensor&);
  PointwiseValueLoss(std::string name, SumFunction sum) : name_(std::move(name)), sum_(sum) {}
  std::string name() const override { return name_; }
  TargetKind targets() const override { return TargetKind::kValues; }
  Var sum(Tape& tape, const Var& output, const Tensor& targets) const override {
    return sum_(tape, output, as_rows_of(targets, output));
  }

 private:
  std::string name_;
  SumFunction sum_;
};

}  // namespace

std::shared_ptr<const Loss> cross_entropy_loss() {
  static const auto loss = std::make_shared<const CrossEntropyLoss>();
  return loss;
}
std::shared_ptr<const Loss> mse_loss() {
  return std::make_shared<const PointwiseValueLoss>("mse", squared_error_sum);
}
std::shared_ptr<const Loss> bce_with_logits_loss() {
  return std::make_shared<const PointwiseValueLoss>("bce_with_logits", bce_with_logits_sum);
}

bool is_cross_entropy(const Loss& loss) {
  return dynamic_cast<const CrossEntropyLoss*>(&loss) != nullptr;
}

}  // namespace ls::nn
