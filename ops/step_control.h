// A training step decided on the device (issue 12: a step the host never waits on).
//
// StepControl is one small block of device memory per replica that the step's kernels read and
// write, so nothing in a step needs the host to look at a value: the loss gradient's scale, the
// skip decision on non-finite values, the optimizer's step count (AdamW's bias correction) and
// the dynamic loss scale all live there. The same kernels run in eager steps and in graphs
// (a graph bakes kernel arguments; values that change from step to step must be read here).
//
// A step's kernels, in stream order:
//   step_begin:        grad_seed = loss_scale / labels (the loss gradient's scale: the mean over
//                      the global batch's counted labels, times the loss scale), and
//                      inv_scale = 1 / loss_scale (what the optimizer unscales gradients with).
//   (forward, backward with dlogits scaled by grad_seed, gradient all-reduce, loss all-reduce,
//    count of non-finite summed gradients)
//   step_decide:       skip = the count is not 0 or the loss sum is not finite; every replica
//                      holds the same summed values, so every replica decides alike; when not
//                      skipped, optimizer_steps += 1.
//   (optimizer kernels: nothing when skip, else gradients times inv_scale and optimizer_steps as
//    the step count)
//   update_loss_scale: dynamic scaling only (f16): after a skip, loss_scale *= backoff (not below
//                      min_scale) and good_steps = 0; after growth_interval good steps in a row,
//                      loss_scale *= growth (not above max_scale) and good_steps = 0.
//                      PyTorch's GradScaler schedule.
// Kernels: ops/host/step_control.cpp, ops/cuda/step_control.cu. Asynchronous in stream order.
#pragma once

#include <cmath>
#include <cstdint>

#include <lockstep/error.h>
#include <lockstep/precision.h>
#include "ops/op_check.h"
#include "ops/op_table.h"

namespace ls {

// The device block (32 bytes; a Tensor of kStepControlWords i32 words holds one).
struct StepControl {
  float loss_scale = 1;         // multiplies the loss gradient (1: no scaling)
  int32_t good_steps = 0;       // steps since the last skip or growth
  int32_t optimizer_steps = 0;  // steps the optimizer took (AdamW counts from 1)
  int32_t skip = 0;             // this step: 1 = the optimizer does nothing
  float grad_seed = 0;          // this step: loss_scale / labels
  float inv_scale = 1;          // this step: 1 / loss_scale
  float labels = 1;             // this step: counted labels of the global batch (set by the host)
  int32_t reserved = 0;         // pads the block to eight words
};
inline constexpr int64_t kStepControlWords = sizeof(StepControl) / 4;
static_assert(sizeof(StepControl) == 32, "StepControl is eight 4-byte words");

inline void check_loss_scale_config(const LossScaleConfig& c) {
  LS_CHECK(std::isfinite(c.initial_scale) && c.initial_scale > 0, "loss scale: initial_scale is ",
           c.initial_scale, "; it must be a positive finite number (65536 is usual for f16)");
  LS_CHECK(std::isfinite(c.growth) && c.growth > 1, "loss scale: growth is ", c.growth,
           "; it must be > 1 (2 is usual)");
  LS_CHECK(c.backoff > 0 && c.backoff < 1, "loss scale: backoff is ", c.backoff,
           "; it must be in (0, 1) (0.5 is usual)");
  LS_CHECK(c.growth_interval >= 1, "loss scale: growth_interval is ", c.growth_interval,
           "; it must be >= 1 step (2000 is usual)");
  LS_CHECK(c.min_scale > 0 && c.min_scale <= c.max_scale && std::isfinite(c.max_scale),
           "loss scale: min_scale ", c.min_scale, " and max_scale ", c.max_scale,
           " must satisfy 0 < min_scale <= max_scale < infinity");
  LS_CHECK(c.initial_scale >= c.min_scale && c.initial_scale <= c.max_scale,
           "loss scale: initial_scale ", c.initial_scale, " is outside [min_scale, max_scale] = [",
           c.min_scale, ", ", c.max_scale, "]");
}

struct StepControlOps {
  void (*step_begin)(StepControl* control, Stream& stream) = nullptr;
  // loss_and_count: f32 [2] = {global loss sum, non-finite summed gradients}.
  void (*step_decide)(StepControl* control, const float* loss_and_count, Stream& stream) = nullptr;
  void (*update_loss_scale)(StepControl* control, const LossScaleConfig& config,
                            Stream& stream) = nullptr;
  // marks[index] = the device's clock in nanoseconds when the stream reaches this point.
  void (*stamp_clock)(int64_t* marks, int32_t index, Stream& stream) = nullptr;
};

namespace detail {
inline StepControl* step_control_of(const char* op, const Tensor& control, const Stream& stream) {
  op_check::tensor(op, "control", control, DType::kI32, stream);
  LS_CHECK(control.numel() == kStepControlWords, op, ": control is ", control.describe(),
           "; expected i32 [", kStepControlWords, "] (one StepControl)");
  return reinterpret_cast<StepControl*>(control.data());
}
}  // namespace detail

inline void step_begin(const Tensor& control, Stream& stream) {
  op_entry(&StepControlOps::step_begin, "step_begin", stream, [&] {
    return OpLaunches{ledger::moves("step_begin_kernel", {&control})};
  })(detail::step_control_of("step_begin", control, stream), stream);
}

inline void step_decide(const Tensor& control, const Tensor& loss_and_count, Stream& stream) {
  op_check::tensor("step_decide", "loss_and_count", loss_and_count, DType::kF32, stream);
  LS_CHECK(loss_and_count.numel() == 2, "step_decide: loss_and_count is ",
           loss_and_count.describe(), "; expected f32 [2] = {loss sum, non-finite count}");
  op_entry(&StepControlOps::step_decide, "step_decide", stream, [&] {
    return OpLaunches{ledger::moves("step_decide_kernel", {&control, &loss_and_count})};
  })(detail::step_control_of("step_decide", control, stream), loss_and_count.f32(), stream);
}

inline void update_loss_scale(const Tensor& control, const LossScaleConfig& config,
                              Stream& stream) {
  check_loss_scale_config(config);
  op_entry(&StepControlOps::update_loss_scale, "update_loss_scale", stream, [&] {
    return OpLaunches{ledger::moves("update_loss_scale_kernel", {&control})};
  })(detail::step_control_of("update_loss_scale", control, stream), config, stream);
}

// Writes the device's own clock (nanoseconds; host devices: the steady clock, CUDA: the GPU's
// global timer) into mark `index` of `marks` (i32 [2 * n]: n int64 marks) when the stream gets
// there: a step's timeline measured by the device itself, in eager steps and in graphs alike
// (the address is baked, the clock is read at each launch). Differences of marks of one device
// are durations; marks of different devices are on different clocks.
inline void stamp_device_clock(const Tensor& marks, int32_t index, Stream& stream) {
  op_check::tensor("stamp_device_clock", "marks", marks, DType::kI32, stream);
  LS_CHECK(index >= 0 && 2 * static_cast<int64_t>(index) + 2 <= marks.numel(),
           "stamp_device_clock: mark ", index, " is outside marks ", marks.describe(),
           " (two i32 words per mark)");
  op_entry(&StepControlOps::stamp_clock, "stamp_device_clock", stream, [&] {
    return OpLaunches{ledger::moves("stamp_clock_kernel", {})};
  })(reinterpret_cast<int64_t*>(marks.data()), index, stream);
}

// The one rule both backends apply in update_loss_scale (host code and CUDA device code).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void apply_loss_scale_rule(StepControl& c, const LossScaleConfig& config) {
  if (!config.dynamic) return;
  if (c.skip != 0) {
    c.loss_scale = c.loss_scale * config.backoff;
    if (c.loss_scale < config.min_scale) c.loss_scale = config.min_scale;
    c.good_steps = 0;
    return;
  }
  if (++c.good_steps >= config.growth_interval) {
    c.loss_scale = c.loss_scale * config.growth;
    if (c.loss_scale > config.max_scale) c.loss_scale = config.max_scale;
    c.good_steps = 0;
  }
}

// step_decide's rule, shared likewise.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline void apply_step_decision(StepControl& c, float loss_sum, float nonfinite) {
  // x - x is 0 only for finite x (NaN and +-inf give NaN); no <cmath> call in device code.
  const bool finite_loss = (loss_sum - loss_sum) == 0.0f;
  c.skip = (nonfinite != 0.0f || !finite_loss) ? 1 : 0;
  if (c.skip == 0) ++c.optimizer_steps;
}

}  // namespace ls
