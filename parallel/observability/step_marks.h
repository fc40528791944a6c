// The points of a data-parallel step that each device stamps with its own clock (issue 25: how
// each device spends a step). The stamps are kernels in stream order (stamp_device_clock,
// ops/step_control.h), so they time what the device did, not what the host enqueued, and they
// run inside a step's graph as in an eager step. The marks travel back with the step's outcome
// (parallel/data_parallel/step_io.h); DeviceUseMeter (device_use_meter.h) turns them into shares.
#pragma once

#include <cstdint>

namespace ls {

enum StepMark : int32_t {
  kStepBegin,         // the replica starts the step: its input's copy comes next
  kInputReady,        // the input is on the device: forward starts
  kBackwardEnd,       // the last micro-batch's backward is computed: the reducer takes over
  kGradientsReduced,  // every gradient bucket's sum has arrived: compute goes on
  kStepEnd,           // the loss all-reduce, the optimizer (and ZeRO's all-gather) are done
  kStepMarks
};

// One step's marks, nanoseconds on the device's clock.
struct StepMarks {
  int64_t ns[kStepMarks] = {};
};
inline constexpr int64_t kStepMarkWords = 2 * kStepMarks;  // as the i32 tensor the stamps fill

}  // namespace ls
