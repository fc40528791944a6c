#include "parallel/observability/device_use_meter.h"

#include <algorithm>

#include <lockstep/error.h>

namespace ls {
namespace {

double ms_between(int64_t from_ns, int64_t to_ns) {
  return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-6 : 0.0;
}

// One data-parallel step's parts on one device.
DeviceUse step_parts(const StepMarks& m, double gap_ms) {
  const int64_t* t = m.ns;
  DeviceUse part;
  part.input_ms = ms_between(t[kStepBegin], t[kInputReady]);
  part.compute_ms =
      ms_between(t[kInputReady], t[kBackwardEnd]) + ms_between(t[kGradientsReduced], t[kStepEnd]);
  part.comm_wait_ms = ms_between(t[kBackwardEnd], t[kGradientsReduced]);
  part.idle_ms = gap_ms;
  return part;
}

// One pipeline step's parts on one stage.
DeviceUse stage_parts(const DeviceUseMeter::StageStep& s, double gap_ms) {
  DeviceUse part;
  part.input_ms = ms_between(s.begin_ns, s.input_ns);
  part.compute_ms = s.busy_ms + ms_between(s.optimizer_begin_ns, s.end_ns);
  // Between its actions, and from its own end to the optimizer (enqueued once every stage is
  // done) or, under post-validation, from its optimizer's end to the step's verdict: waiting
  // for the other stages.
  part.bubble_ms = std::max(0.0, ms_between(s.input_ns, s.last_action_end_ns) - s.busy_ms) +
                   ms_between(s.actions_end_ns, s.optimizer_begin_ns);
  part.comm_wait_ms = ms_between(s.last_action_end_ns, s.actions_end_ns);
  if (s.validated_ns > s.end_ns) part.bubble_ms += ms_between(s.end_ns, s.validated_ns);
  part.idle_ms = gap_ms;
  return part;
}

void add_to(DeviceUse& total, const DeviceUse& part) {
  ++total.steps;
  total.input_ms += part.input_ms;
  total.compute_ms += part.compute_ms;
  total.comm_wait_ms += part.comm_wait_ms;
  total.idle_ms += part.idle_ms;
  total.bubble_ms += part.bubble_ms;
  total.window_ms +=
      part.input_ms + part.compute_ms + part.comm_wait_ms + part.idle_ms + part.bubble_ms;
}

}  // namespace

DeviceUseMeter::DeviceUseMeter(std::vector<Device> devices, int first_replica,
                               int64_t unmeasured_steps)
    : last_end_ns_(devices.size(), 0), unmeasured_steps_(unmeasured_steps) {
  for (size_t i = 0; i < devices.size(); ++i) {
    DeviceUse use;
    use.device = devices[i];
    use.replica = first_replica + static_cast<int>(i);
    warm_.push_back(use);
    all_.push_back(use);
  }
}

void DeviceUseMeter::add(int64_t step, const std::vector<StepMarks>& marks) {
  LS_ASSERT(marks.size() == warm_.size(), "marks of ", marks.size(), " devices for ", warm_.size());
  const bool continuous = continuous_ && step == last_step_ + 1;
  for (size_t i = 0; i < marks.size(); ++i) {
    const double gap = continuous ? ms_between(last_end_ns_[i], marks[i].ns[kStepBegin]) : 0.0;
    record(step, i, step_parts(marks[i], gap));
    last_end_ns_[i] = marks[i].ns[kStepEnd];
  }
  last_step_ = step;
  continuous_ = true;
}

void DeviceUseMeter::add_pipeline(int64_t step, const std::vector<StageStep>& stages) {
  LS_ASSERT(stages.size() == warm_.size(), "timelines of ", stages.size(), " stages for ",
            warm_.size());
  const bool continuous = continuous_ && step == last_step_ + 1;
  for (size_t i = 0; i < stages.size(); ++i) {
    const double gap = continuous ? ms_between(last_end_ns_[i], stages[i].begin_ns) : 0.0;
    record(step, i, stage_parts(stages[i], gap));
    last_end_ns_[i] = std::max(stages[i].end_ns, stages[i].validated_ns);
  }
  last_step_ = step;
  continuous_ = true;
}

void DeviceUseMeter::record(int64_t step, size_t device, const DeviceUse& part) {
  if (step > 1) add_to(all_[device], part);
  if (step > unmeasured_steps_) add_to(warm_[device], part);
}

std::vector<DeviceUse> DeviceUseMeter::devices() const {
  return !warm_.empty() && warm_[0].steps > 0 ? warm_ : all_;
}

}  // namespace ls
