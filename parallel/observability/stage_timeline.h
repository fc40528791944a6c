// A pipeline stage's step on its device's clock (PipelineStage::run and step): the verdict's
// meter (parallel/observability/device_use_meter.h) and the trace (step_trace.h) read it.
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/pipeline_schedule.h>

namespace ls {

// A stage's step on its device's clock, in nanoseconds (issue 25: the verdict and the trace).
struct StageAction {
  PipelineAction::Kind kind = PipelineAction::Kind::kForward;
  int micro_batch = 0;
  int64_t start_ns = 0, end_ns = 0;  // busy: from its input's arrival to its last kernel
};
struct StageTimeline {
  int64_t begin_ns = 0;        // the step starts: its input's copy comes next
  int64_t input_ns = 0;        // the input is on the device: the actions start
  int64_t actions_end_ns = 0;  // the actions, the stage's all-reduce and tied sums are done
  std::vector<StageAction> actions;
};
// The optimizer of the step (PipelineStage::step), enqueued once every stage's run() is done, or
// (ZB-H1, Note [Post-validation]) by run() itself.
struct OptimizerSpan {
  int64_t begin_ns = 0, end_ns = 0;
  int64_t validated_ns = 0;  // post-validation: when the step's verdict reached the stage; else 0
};

}  // namespace ls
