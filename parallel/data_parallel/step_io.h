// What crosses between the host and a replica's device in a step without the host waiting
// (issue 12): the shard goes in through staging slots, the step's outcome comes back through a
// ring of host slots, each copy in stream order.
//
// StepInputs: the caller's batch may be reused as soon as step_async() returns, but the device
// reads it later. So upload() first copies the shard's rows into one of kSlots host staging
// buffers (page-locked on CUDA: DeviceRuntime::allocate_pinned), then enqueues the copy from
// there. Before a slot is refilled, upload() waits for that slot's previous upload to have run:
// kSlots steps back, long done unless the host runs that far ahead of the device.
// StepOutcomes: export_outcome() enqueues the copy of the step's loss sum, non-finite count,
// StepControl and timeline marks (parallel/observability/step_marks.h) into the ring slot of its step and records an event; wait() returns them once
// that event completes, bounded by a deadline (the watchdog cannot see collectives inside a
// CUDA graph, so this wait must end by itself).
// Thread-safety: the replica's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "ops/step_control.h"
#include "parallel/observability/step_marks.h"

namespace ls {

struct Shard;  // parallel/data_parallel/replica.h

class StepInputs {
 public:
  static constexpr int kSlots = 2;
  explicit StepInputs(Device device);
  ~StepInputs();
  StepInputs(const StepInputs&) = delete;
  StepInputs& operator=(const StepInputs&) = delete;

  // Stages the shard (inputs, labels) and the global batch's counted labels, then enqueues their
  // copies into `inputs` and `labels` ((re)allocated on `device` when the shard's shape differs)
  // and into `control_labels` (f32 [1], the StepControl's labels word). Returns whether the
  // device tensors were (re)allocated.
  bool upload(const Shard& shard, float global_labels, Tensor& inputs, Tensor& labels,
              const Tensor& control_labels, Stream& stream);

 private:
  struct Slot {
    void* host = nullptr;  // inputs, labels, then the label count
    size_t bytes = 0;
    std::unique_ptr<Event> uploaded;
  };
  Device device_;
  Slot slots_[kSlots];
  int64_t uploads_ = 0;
};

struct ExportedOutcome {
  float loss_sum = 0;     // the global loss sum (all-reduced)
  float nonfinite = 0;    // non-finite values in the summed gradients
  StepControl control{};  // after the step: skip, loss scale, optimizer steps
  StepMarks marks{};      // the step's timeline on the device's clock
};

class StepOutcomes {
 public:
  static constexpr int kSlots = 4;  // more than DataParallel ever keeps in flight
  // launch_mark_words: the size of the reducer's launch marks (i32 words) exported with each step;
  // layer_mark_words: the most words of layer marks (DeviceLayerClock) a step exports.
  explicit StepOutcomes(Device device, int64_t launch_mark_words = 0, int64_t layer_mark_words = 0);
  ~StepOutcomes();
  StepOutcomes(const StepOutcomes&) = delete;
  StepOutcomes& operator=(const StepOutcomes&) = delete;

  // Enqueues the copies of step `step`'s loss_and_count (f32 [2]), control, marks (i32
  // [2 * kStepMarks]) and the reducer's launch marks into its slot.
  // And `layer_marks` (i32, at most layer_mark_words), when defined.
  void export_outcome(int64_t step, const Tensor& loss_and_count, const Tensor& control,
                      const Tensor& marks, const Tensor& launch_marks, const Tensor& layer_marks,
                      Stream& stream);
  // Waits until step `step`'s copies have run and returns them; re-throws an error the stream
  // raised before them; throws a timeout error naming `who` after `deadline`.
  ExportedOutcome wait(int64_t step, std::chrono::milliseconds deadline, const std::string& who);
  // After wait(step): its launch marks (Reducer::launch_marks) and layer marks, as int64
  // nanoseconds.
  std::vector<int64_t> launch_marks(int64_t step) const;
  std::vector<int64_t> layer_marks(int64_t step) const;

 private:
  struct Slot {
    ExportedOutcome* host = nullptr;  // page-locked on CUDA
    int64_t* launch_marks = nullptr;  // likewise, launch_mark_words_ / 2 of them
    int64_t* layer_marks = nullptr;   // likewise, up to layer_mark_words_ / 2
    int64_t layer_words = 0;          // exported this step
    int64_t step = -1;
    std::unique_ptr<Event> copied;
  };
  Device device_;
  int64_t launch_mark_words_ = 0;
  int64_t layer_mark_words_ = 0;
  Slot slots_[kSlots];
};

}  // namespace ls
