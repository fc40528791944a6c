// StepInputs and StepOutcomes (see parallel/data_parallel/step_io.h).
#include "parallel/data_parallel/step_io.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <lockstep/error.h>
#include "parallel/runtime/step_common.h"

namespace ls {
namespace {

// Waits for `event` until `deadline` passes: spins briefly, then sleeps in growing slices, so a
// step that is nearly done costs no sleep and a long one costs no core.
bool wait_until_complete(const Event& event, std::chrono::milliseconds deadline) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now(), end = start + deadline;
  std::chrono::microseconds nap{20};
  while (!event.query()) {
    const Clock::time_point now = Clock::now();
    if (now >= end) return false;
    if (now - start > std::chrono::microseconds(200)) {
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, std::chrono::milliseconds(2));
    }
  }
  return true;
}

}  // namespace

StepInputs::StepInputs(Device device) : device_(device) {
  for (Slot& slot : slots_) slot.uploaded = device_runtime(device).create_sync_event();
}

StepInputs::~StepInputs() {
  for (Slot& slot : slots_) {
    if (slot.host == nullptr) continue;
    try {
      slot.uploaded->synchronize();  // the copy may still read it (after a failure: skipped)
    } catch (...) {                  // reported by the step that failed
    }
    device_runtime(device_).free_pinned(slot.host);
  }
}

bool StepInputs::upload(const Shard& shard, float global_labels, Tensor& inputs, Tensor& labels,
                        const Tensor& control_labels, Stream& stream) {
  Slot& slot = slots_[uploads_++ % kSlots];
  slot.uploaded->synchronize();  // its previous upload, kSlots steps ago, has been copied
  const bool tokens = shard.tokens != nullptr;
  const bool named = shard.named != nullptr;
  const PackedInputs layout = named ? packed_layout(*shard.named, shard.rows) : PackedInputs{};
  const size_t input_bytes =
      named ? layout.bytes : static_cast<size_t>(shard.rows * shard.features) * 4;
  const size_t label_bytes = static_cast<size_t>(shard.rows * shard.label_width) * 4;
  const size_t need = round_up_64(input_bytes) + round_up_64(label_bytes) + sizeof(float);
  DeviceRuntime& runtime = device_runtime(device_);
  if (slot.bytes < need) {
    if (slot.host != nullptr) runtime.free_pinned(slot.host);  // its upload has run (above)
    slot.host = nullptr;
    slot.host = runtime.allocate_pinned(need);
    slot.bytes = need;
  }
  auto* base = static_cast<char*>(slot.host);
  char* host_labels = base + round_up_64(input_bytes);
  auto* host_count = reinterpret_cast<float*>(host_labels + round_up_64(label_bytes));
  if (named) {
    pack_inputs(shard, layout, base);
  } else {
    std::memcpy(base, tokens ? static_cast<const void*>(shard.tokens) : shard.images, input_bytes);
  }
  std::memcpy(host_labels, shard.target_words(), label_bytes);
  *host_count = global_labels;

  Shard staged = shard;
  if (named) {
    staged.packed = base;
  } else {
    staged.tokens = tokens ? reinterpret_cast<const int32_t*>(base) : nullptr;
    staged.images = tokens ? nullptr : reinterpret_cast<const float*>(base);
  }
  staged.labels = reinterpret_cast<const int32_t*>(host_labels);
  const void* before = inputs.defined() ? inputs.data() : nullptr;
  upload_shard(staged, /*with_labels=*/true, device_, inputs, labels, stream);
  control_labels.copy_from_host_async(host_count, sizeof(float), stream);
  stream.record(*slot.uploaded);
  return inputs.data() != before;
}

StepOutcomes::StepOutcomes(Device device, int64_t launch_mark_words, int64_t layer_mark_words)
    : device_(device), launch_mark_words_(launch_mark_words), layer_mark_words_(layer_mark_words) {
  for (Slot& slot : slots_) {
    slot.host = static_cast<ExportedOutcome*>(
        device_runtime(device).allocate_pinned(sizeof(ExportedOutcome)));
    if (launch_mark_words > 0) {
      slot.launch_marks = static_cast<int64_t*>(device_runtime(device).allocate_pinned(
          static_cast<size_t>(launch_mark_words) * sizeof(int32_t)));
    }
    if (layer_mark_words > 0) {
      slot.layer_marks = static_cast<int64_t*>(device_runtime(device).allocate_pinned(
          static_cast<size_t>(layer_mark_words) * sizeof(int32_t)));
    }
    slot.copied = device_runtime(device).create_sync_event();
  }
}

StepOutcomes::~StepOutcomes() {
  for (Slot& slot : slots_) {
    try {
      slot.copied->synchronize();
    } catch (...) {  // reported by the step that failed
    }
    device_runtime(device_).free_pinned(slot.host);
    if (slot.launch_marks != nullptr) device_runtime(device_).free_pinned(slot.launch_marks);
    if (slot.layer_marks != nullptr) device_runtime(device_).free_pinned(slot.layer_marks);
  }
}

void StepOutcomes::export_outcome(int64_t step, const Tensor& loss_and_count, const Tensor& control,
                                  const Tensor& marks, const Tensor& launch_marks,
                                  const Tensor& layer_marks, Stream& stream) {
  Slot& slot = slots_[step % kSlots];
  slot.step = step;
  loss_and_count.copy_to_host_async(&slot.host->loss_sum, 2 * sizeof(float), stream);
  control.copy_to_host_async(&slot.host->control, sizeof(StepControl), stream);
  marks.copy_to_host_async(&slot.host->marks, sizeof(StepMarks), stream);
  if (slot.launch_marks != nullptr) {
    LS_ASSERT(launch_marks.numel() == launch_mark_words_);
    launch_marks.copy_to_host_async(slot.launch_marks, launch_marks.nbytes(), stream);
  }
  slot.layer_words = 0;
  if (slot.layer_marks != nullptr && layer_marks.defined() && layer_marks.numel() > 0) {
    LS_ASSERT(layer_marks.numel() <= layer_mark_words_);
    slot.layer_words = layer_marks.numel();
    layer_marks.copy_to_host_async(slot.layer_marks, layer_marks.nbytes(), stream);
  }
  stream.record(*slot.copied);
}

ExportedOutcome StepOutcomes::wait(int64_t step, std::chrono::milliseconds deadline,
                                   const std::string& who) {
  Slot& slot = slots_[step % kSlots];
  LS_ASSERT(slot.step == step, "outcome of step ", step, " asked for, but slot holds step ",
            slot.step);
  LS_CHECK_AS(ErrorKind::kTimeout, wait_until_complete(*slot.copied, deadline), who, ": step ",
              step + 1, " has not finished on the device after ",
              std::chrono::duration<double>(deadline).count(),
              " s (its work may be inside a graph, where the watchdog cannot see its collectives); "
              "run with --no-graphs to find the stuck collective, or raise the collective timeout");
  slot.copied->synchronize();  // complete: re-throws an error of the work before it
  return *slot.host;
}

std::vector<int64_t> StepOutcomes::layer_marks(int64_t step) const {
  const Slot& slot = slots_[step % kSlots];
  LS_ASSERT(slot.step == step && slot.copied->query());
  return {slot.layer_marks, slot.layer_marks + slot.layer_words / 2};
}

std::vector<int64_t> StepOutcomes::launch_marks(int64_t step) const {
  const Slot& slot = slots_[step % kSlots];
  LS_ASSERT(slot.step == step && slot.copied->query());
  if (slot.launch_marks == nullptr) return {};
  return {slot.launch_marks, slot.launch_marks + launch_mark_words_ / 2};
}

}  // namespace ls
