// Flight recorder and desync checker (see parallel/observability/flight_recorder.h).
#include "parallel/observability/flight_recorder.h"

#include <lockstep/error.h>
#include "engine/core/runtime.h"

namespace ls {

// Note [A group's collectives end at its end]
// NCCL launches a group's collectives at the outermost ncclGroupEnd, and the host communicator
// enqueues them there too. An end event recorded right after the call inside the group would
// stand BEFORE the collective on the stream, so it would complete as soon as the earlier work
// did and the watchdog would read a collective stuck in a fused launch as completed (and see the
// hang only at the step's outcome deadline). So inside a group only the start is recorded at the
// call; the ends are recorded, in order, once the outermost group_end has returned.

void DesyncChecker::check(int replica, const CollectiveDesc& desc) {
  if (replicas_ <= 1) return;
  std::lock_guard lock(mutex_);
  auto [it, first] = pending_.try_emplace(desc.seq);
  Seen& seen = it->second;
  if (first) {
    seen = {desc, replica, 1};
    return;
  }
  if (!same_collective(seen.desc, desc)) {
    LS_THROW_AS(ErrorKind::kDesync, "collective desync at #", desc.seq, ": replica ", seen.replica,
                " issued ", describe(seen.desc), " but replica ", replica, " issued ",
                describe(desc),
                "; every replica must issue the same collectives in the same order");
  }
  if (++seen.count == replicas_) pending_.erase(it);
}

RecordingCommunicator::RecordingCommunicator(std::unique_ptr<Communicator> inner,
                                             std::shared_ptr<DesyncChecker> checker)
    : CommunicatorDecorator(std::move(inner)), checker_(std::move(checker)) {
  DeviceRuntime& runtime = device_runtime(device());
  for (Slot& slot : slots_) {
    slot.start = runtime.create_sync_event();
    slot.end = runtime.create_sync_event();
  }
}

void RecordingCommunicator::issue(CollectiveDesc desc, Stream& stream) {
  desc.label = std::exchange(next_label_, std::string());
  {
    std::lock_guard lock(mutex_);
    desc.seq = issued_ + 1;
  }
  const int64_t sequence = desc.seq;
  Slot& slot = slots_[static_cast<size_t>(sequence) % kRingSize];
  try {
    checker_->check(rank(), desc);
  } catch (const Error&) {
    // Kept in the ring though never passed on, so the flight recorder's file shows both sides of
    // the desync (lockstep-doctor --flight).
    std::lock_guard lock(mutex_);
    issued_ = sequence;
    slot.record = {desc, std::chrono::steady_clock::now(), false, false};
    slot.record.refused = true;
    throw;
  }
  {
    std::lock_guard lock(mutex_);
    issued_ = sequence;
    slot.record = {desc, std::chrono::steady_clock::now(), false, false};
  }
  // Inside a CUDA graph capture an event record is a graph edge, and the event cannot be queried
  // afterwards (cudaErrorCapturedEvent): such a collective is logged, not timed, and counts as
  // done once issued (the graph's launches are bounded by the step's outcome deadline instead).
  // The host backend never gets here while capturing: it captures the call above this layer.
  if (device_runtime(stream.device()).capturing(stream)) {
    issue_collective(inner(), desc, stream);
    std::lock_guard lock(mutex_);
    slot.record.in_graph = true;
    slot.start_of = slot.end_of = 0;
    return;
  }
  stream.record(*slot.start);
  {
    std::lock_guard lock(mutex_);
    slot.start_of = sequence;
  }
  issue_collective(inner(), desc, stream);
  if (group_depth_ > 0) {
    unended_.push_back({sequence, &stream});
    return;
  }
  record_end(sequence, stream);
}

void RecordingCommunicator::record_end(int64_t sequence, Stream& stream) {
  Slot& slot = slots_[static_cast<size_t>(sequence) % kRingSize];
  stream.record(*slot.end);
  std::lock_guard lock(mutex_);
  slot.end_of = sequence;
}

void RecordingCommunicator::group_start() {
  inner().group_start();
  ++group_depth_;
}

void RecordingCommunicator::group_end() {
  if (group_depth_ > 0) --group_depth_;  // an unbalanced end: the inner communicator says so
  std::vector<Unended> unended;
  if (group_depth_ == 0) unended.swap(unended_);
  inner().group_end();  // may throw: the held collectives then never ran, and stay unended
  // A ring slot reused inside one long group holds a newer collective: skip the older ends.
  for (const Unended& u : unended) {
    const Slot& slot = slots_[static_cast<size_t>(u.sequence) % kRingSize];
    if (slot.record.desc.seq == u.sequence) record_end(u.sequence, *u.stream);
  }
}

int64_t RecordingCommunicator::issued() const {
  std::lock_guard lock(mutex_);
  return issued_;
}

std::vector<CollectiveRecord> RecordingCommunicator::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<CollectiveRecord> out;
  const int64_t first = std::max<int64_t>(1, issued_ - static_cast<int64_t>(kRingSize) + 1);
  for (int64_t seq = first; seq <= issued_; ++seq) {
    const Slot& slot = slots_[static_cast<size_t>(seq) % kRingSize];
    CollectiveRecord record = slot.record;
    record.started = slot.start_of == seq && slot.start->query();
    record.completed = record.in_graph || (slot.end_of == seq && slot.end->query());
    out.push_back(std::move(record));
  }
  return out;
}

}  // namespace ls
