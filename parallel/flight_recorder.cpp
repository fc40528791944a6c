// Flight recorder and desync checker (see parallel/flight_recorder.h).
#include "parallel/flight_recorder.h"

#include "engine/core/error.h"
#include "engine/core/runtime.h"

namespace ls {

std::string CollectiveFingerprint::str() const {
  std::string out = std::string(collective_name(kind)) + "(" + std::string(dtype_name(dtype)) +
                    ", count=" + std::to_string(count);
  if (kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kReduceScatter) {
    out += ", " + std::string(reduce_op_name(op));
  }
  if (kind == CollectiveKind::kBroadcast) out += ", root=" + std::to_string(root);
  return out + ")";
}

void DesyncChecker::check(int64_t sequence, int replica, const CollectiveFingerprint& fingerprint,
                          const std::string& label) {
  if (replicas_ <= 1) return;
  std::lock_guard lock(mutex_);
  auto [it, first] = pending_.try_emplace(sequence);
  Seen& seen = it->second;
  if (first) {
    seen = {fingerprint, replica, label, 1};
    return;
  }
  if (!(seen.fingerprint == fingerprint)) {
    const std::string theirs = seen.fingerprint.str() + (seen.label.empty() ? "" : " [" + seen.label + "]");
    const std::string mine = fingerprint.str() + (label.empty() ? "" : " [" + label + "]");
    LS_THROW("collective desync at #", sequence, ": replica ", seen.replica, " issued ", theirs,
             " but replica ", replica, " issued ", mine,
             "; every replica must issue the same collectives in the same order");
  }
  if (++seen.count == replicas_) pending_.erase(it);
}

RecordingCommunicator::RecordingCommunicator(std::unique_ptr<Communicator> inner,
                                             std::shared_ptr<DesyncChecker> checker)
    : inner_(std::move(inner)), checker_(std::move(checker)) {
  DeviceRuntime& runtime = device_runtime(inner_->device());
  for (Slot& slot : slots_) {
    slot.start = runtime.create_event();
    slot.end = runtime.create_event();
  }
}

template <typename Call>
void RecordingCommunicator::recorded(const CollectiveFingerprint& fingerprint, Stream& stream,
                                     Call&& call) {
  std::string label = std::exchange(next_label_, std::string());
  int64_t sequence;
  {
    std::lock_guard lock(mutex_);
    sequence = issued_ + 1;
  }
  checker_->check(sequence, rank(), fingerprint, label);
  Slot& slot = slots_[static_cast<size_t>(sequence) % kRingSize];
  {
    std::lock_guard lock(mutex_);
    issued_ = sequence;
    slot.record = {sequence, fingerprint, std::move(label), std::chrono::steady_clock::now(), false, false};
  }
  stream.record(*slot.start);
  {
    std::lock_guard lock(mutex_);
    slot.start_of = sequence;
  }
  call();
  stream.record(*slot.end);
  std::lock_guard lock(mutex_);
  slot.end_of = sequence;
}

void RecordingCommunicator::all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                       ReduceOp op, Stream& stream) {
  recorded({CollectiveKind::kAllReduce, dtype, count, op, -1}, stream,
           [&] { inner_->all_reduce(send, recv, count, dtype, op, stream); });
}

void RecordingCommunicator::reduce_scatter(const void* send, void* recv, size_t recv_count,
                                           DType dtype, ReduceOp op, Stream& stream) {
  recorded({CollectiveKind::kReduceScatter, dtype, recv_count, op, -1}, stream,
           [&] { inner_->reduce_scatter(send, recv, recv_count, dtype, op, stream); });
}

void RecordingCommunicator::all_gather(const void* send, void* recv, size_t send_count,
                                       DType dtype, Stream& stream) {
  recorded({CollectiveKind::kAllGather, dtype, send_count, ReduceOp::kSum, -1}, stream,
           [&] { inner_->all_gather(send, recv, send_count, dtype, stream); });
}

void RecordingCommunicator::broadcast(const void* send, void* recv, size_t count, DType dtype,
                                      int root, Stream& stream) {
  recorded({CollectiveKind::kBroadcast, dtype, count, ReduceOp::kSum, root}, stream,
           [&] { inner_->broadcast(send, recv, count, dtype, root, stream); });
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
    record.completed = slot.end_of == seq && slot.end->query();
    out.push_back(std::move(record));
  }
  return out;
}

}  // namespace ls
