// The step-control kernels of ops/step_control.h on CUDA: step_begin, step_decide and
// update_loss_scale, each one single-thread launch on the StepControl block, asynchronous on the
// stream. The rules themselves are the shared __host__ __device__ functions of
// ops/step_control.h (apply_step_decision, apply_loss_scale_rule), so both backends decide
// alike. One thread is enough: the block is 32 bytes; what these launches save is the host's
// wait for the values, not device time.
#include <cuda_runtime.h>

#include "ops/cuda/cuda_launch.h"
#include "ops/step_control.h"

namespace ls::cuda_ops {
namespace {

// grad_seed and inv_scale in f32 with IEEE division (no fast math here), as the host computes
// them.
__global__ void step_begin_kernel(StepControl* control) {
  StepControl c = *control;
  c.grad_seed = c.loss_scale / c.labels;
  c.inv_scale = 1.0f / c.loss_scale;
  *control = c;
}

__global__ void step_decide_kernel(StepControl* control, const float* loss_and_count) {
  StepControl c = *control;
  apply_step_decision(c, loss_and_count[0], loss_and_count[1]);
  *control = c;
}

// config by value: a kernel argument, baked into a graph like any other (it is fixed per run).
__global__ void update_loss_scale_kernel(StepControl* control, LossScaleConfig config) {
  StepControl c = *control;
  apply_loss_scale_rule(c, config);
  *control = c;
}

// The GPU's global timer (nanoseconds, one clock for the whole device); the emulator reads the
// host's steady clock. nvcc's host pass compiles the body too but never calls it.
__device__ inline int64_t global_timer_ns() {
#if defined(LOCKSTEP_CUDA_EMULATED)
  return ::ls::cuda_emu::global_timer_ns();
#elif defined(__CUDA_ARCH__)
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return static_cast<int64_t>(t);
#else
  return 0;
#endif
}

__global__ void stamp_clock_kernel(int64_t* marks, int32_t index) {
  marks[index] = global_timer_ns();
}

}  // namespace

void stamp_clock(int64_t* marks, int32_t index, Stream& on) {
  const CudaLaunch launch(on);
  LS_LAUNCH(stamp_clock_kernel, 1, 1, 0, launch.stream(), marks, index);
  LS_CUDA_CHECK_LAUNCH();
}

void step_begin(StepControl* control, Stream& on) {
  const CudaLaunch launch(on);
  LS_LAUNCH(step_begin_kernel, 1, 1, 0, launch.stream(), control);
  LS_CUDA_CHECK_LAUNCH();
}

void step_decide(StepControl* control, const float* loss_and_count, Stream& on) {
  const CudaLaunch launch(on);
  LS_LAUNCH(step_decide_kernel, 1, 1, 0, launch.stream(), control, loss_and_count);
  LS_CUDA_CHECK_LAUNCH();
}

void update_loss_scale(StepControl* control, const LossScaleConfig& config, Stream& on) {
  const CudaLaunch launch(on);
  LS_LAUNCH(update_loss_scale_kernel, 1, 1, 0, launch.stream(), control, config);
  LS_CUDA_CHECK_LAUNCH();
}

const StepControlOps kCudaStepControl{
    .step_begin = step_begin,
    .step_decide = step_decide,
    .update_loss_scale = update_loss_scale,
    .stamp_clock = stamp_clock,
};
LS_REGISTER_OP_TABLE(StepControlOps, DeviceKind::kCuda, kCudaStepControl);

}  // namespace ls::cuda_ops
