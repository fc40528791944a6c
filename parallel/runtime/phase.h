// Where a data-parallel replica is in a step (internal): for error messages, the watchdog's
// report and the flight recorder.
#pragma once

namespace ls {

// Where a replica is, for error messages and (later) the watchdog.
// kDevice: the host waits for a step's device work (enqueued earlier: eager or a graph launch).
enum class Phase {
  kIdle,
  kSetup,
  kUpload,
  kForward,
  kBackward,
  kReduce,
  kOptimizer,
  kEvaluate,
  kDevice
};
const char* phase_name(Phase phase);

}  // namespace ls
