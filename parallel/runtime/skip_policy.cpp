// SkipPolicy (see parallel/runtime/skip_policy.h).
#include "parallel/runtime/skip_policy.h"

#include <cmath>

#include <lockstep/error.h>

namespace ls {

SkipPolicy::SkipPolicy(int max_consecutive) : max_consecutive_(max_consecutive) {
  LS_CHECK(max_consecutive >= 1, "max_consecutive_skips is ", max_consecutive,
           "; it must be at least 1 (the non-finite steps in a row a run survives)");
}

std::optional<std::string> SkipPolicy::record(const StepVerdict& step) {
  if (!step.skipped) {
    consecutive_ = 0;
    return std::nullopt;
  }
  ++skipped_total_;
  // The loss scale's back-off: expected skips while the scale can still come down.
  if (step.dynamic_loss_scale && std::isfinite(step.loss) &&
      step.loss_scale > step.min_loss_scale) {
    return std::nullopt;
  }
  if (++consecutive_ < max_consecutive_) return std::nullopt;
  std::string why = std::to_string(consecutive_) + " steps in a row (up to step " +
                    std::to_string(step.step) + ") had non-finite loss or gradients (last: loss " +
                    std::to_string(step.loss);
  if (step.nonfinite_values >= 0) {
    why += ", " + std::to_string(step.nonfinite_values) + " non-finite gradient values";
  }
  if (step.dynamic_loss_scale) why += ", loss scale " + std::to_string(step.loss_scale);
  return why + "); lower the learning rate or check the data";
}

}  // namespace ls
