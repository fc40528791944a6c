// The skip policy every strategy applies to its steps' outcomes (internal): a step with a
// non-finite loss or non-finite gradients was skipped (its optimizer left the parameters as they
// were); TrainingOptions::max_consecutive_skips of them in a row end the run (kind non_finite),
// with one message for every strategy. f16's dynamic loss scale skips steps on purpose while it
// backs off from an overflow (the loss itself finite): those count only once the scale is at its
// minimum.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ls {

// What a step's outcome says about skipping, the same on every replica and process.
struct StepVerdict {
  int64_t step = 0;  // 1-based
  bool skipped = false;
  float loss = 0.0f;  // the step's mean loss (may be non-finite)
  // Non-finite gradient values counted on the device (-1: the strategy does not count them).
  int64_t nonfinite_values = -1;
  // f16 with a dynamic loss scale: the scale the step ran at, and the smallest the schedule takes.
  bool dynamic_loss_scale = false;
  float loss_scale = 1.0f;
  float min_loss_scale = 1.0f;
};

class SkipPolicy {
 public:
  explicit SkipPolicy(int max_consecutive);

  // Counts the step. Returns the failure's message (without a process prefix) when this step
  // makes max_consecutive skips in a row, else nothing.
  std::optional<std::string> record(const StepVerdict& step);

  int64_t skipped_total() const { return skipped_total_; }

 private:
  int max_consecutive_;
  int consecutive_ = 0;
  int64_t skipped_total_ = 0;
};

}  // namespace ls
