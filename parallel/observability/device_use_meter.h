// DeviceUseMeter: sums each device's step marks (step_marks.h) into the parts of
// lockstep/device_use.h, as the steps' outcomes arrive in order. The marks of one device are on
// one clock, so each device's parts are exact differences of its own stamps; no clock is compared
// with another device's.
// Thread-safety: the caller's thread only (DataParallel harvests outcomes there).
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/device_use.h>
#include "parallel/observability/step_marks.h"

namespace ls {

class DeviceUseMeter {
 public:
  // The first `unmeasured_steps` steps are warm-up (allocator sizing, the graph's capture).
  DeviceUseMeter(std::vector<Device> devices, int first_replica, int64_t unmeasured_steps = 3);

  // Step `step`'s (1-based) marks of every local device, in order; steps arrive in order.
  void add(int64_t step, const std::vector<StepMarks>& marks);
  // A pipeline's step: every local stage's timeline (its device's clock), in device order.
  struct StageStep {
    int64_t begin_ns = 0, input_ns = 0, last_action_end_ns = 0, actions_end_ns = 0;
    int64_t optimizer_begin_ns = 0, end_ns = 0;  // the optimizer, once every stage is done
    double busy_ms = 0;                          // the actions' own time
    // Post-validation (ZB-H1): the optimizer ran before the other stages were done; when the
    // stage learnt the step's verdict (0 without post-validation). Waiting for it is bubble.
    int64_t validated_ns = 0;
  };
  void add_pipeline(int64_t step, const std::vector<StageStep>& stages);
  // Work other than steps ran (evaluation, a checkpoint): the gap before the next step is not
  // idle time of the devices.
  void interrupt() { continuous_ = false; }

  // Each device's parts over the measured steps; with no step past the warm-up yet, over every
  // step after the first.
  std::vector<DeviceUse> devices() const;
  UseVerdict verdict(double pipeline_theory = -1) const {
    return judge_device_use(devices(), pipeline_theory);
  }

 private:
  // Adds one step's parts of local device `device` to the totals that count step `step`.
  void record(int64_t step, size_t device, const DeviceUse& part);

  std::vector<DeviceUse> warm_, all_;  // past the warm-up; every step after the first
  std::vector<int64_t> last_end_ns_;
  int64_t unmeasured_steps_;
  int64_t last_step_ = 0;
  bool continuous_ = false;  // the previous step ran right before this one
};

}  // namespace ls
