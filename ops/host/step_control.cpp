// Host kernels of ops/step_control.h: one small task each, reading and writing the StepControl
// when the stream runs them (never when they are enqueued: a graph replays the same task).
#include "ops/step_control.h"

#include <lockstep/clock.h>
#include "engine/core/host/host_device.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

void step_begin(StepControl* c, Stream& stream) {
  host_enqueue(stream, [c] {
    c->grad_seed = c->loss_scale / c->labels;
    c->inv_scale = 1.0f / c->loss_scale;
  });
}

void step_decide(StepControl* c, const float* loss_and_count, Stream& stream) {
  host_enqueue(stream, [c, loss_and_count] {
    apply_step_decision(*c, loss_and_count[0], loss_and_count[1]);
  });
}

void update_loss_scale(StepControl* c, const LossScaleConfig& config, Stream& stream) {
  host_enqueue(stream, [c, config] { apply_loss_scale_rule(*c, config); });
}

void stamp_clock(int64_t* marks, int32_t index, Stream& stream) {
  host_enqueue(stream, [marks, index] {
    marks[index] = steady_now_ns();
  });
}

const StepControlOps kHostStepControl{
    .step_begin = step_begin,
    .step_decide = step_decide,
    .update_loss_scale = update_loss_scale,
    .stamp_clock = stamp_clock,
};
LS_REGISTER_OP_TABLE(StepControlOps, DeviceKind::kHost, kHostStepControl);

}  // namespace
}  // namespace ls
