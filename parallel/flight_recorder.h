// Flight recorder and desync checker: what every replica's collectives were doing, for the
// watchdog's report, and a check that every replica issues the same collectives.
//
// RecordingCommunicator wraps a replica's Communicator (host or NCCL): each call gets the next
// sequence number, is checked against the other replicas' call with that number (DesyncChecker,
// in process: no extra collective), and is logged in a ring of the last kRingSize collectives
// with events recorded on the stream just before and after it, so the watchdog can tell
// "enqueued", "started (waiting or running)" and "completed" apart on any backend.
// Thread-safety: calls from the replica's thread; snapshot() and the checker from any thread.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "parallel/communicator.h"

namespace ls {

struct CollectiveFingerprint {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kF32;
  size_t count = 0;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  bool operator==(const CollectiveFingerprint&) const = default;
  std::string str() const;  // "all_reduce(f32, count=1000, sum)"
};

// Compares the fingerprints of collective #k across replicas as each replica issues it.
// A mismatch raises an ls::Error in the issuing thread, before the backend is called, naming both
// replicas and both fingerprints, instead of a hang or a silent corruption.
class DesyncChecker {
 public:
  explicit DesyncChecker(int replicas) : replicas_(replicas) {}
  void check(int64_t sequence, int replica, const CollectiveFingerprint& fingerprint,
             const std::string& label);

 private:
  struct Seen {
    CollectiveFingerprint fingerprint;
    int replica = 0;
    std::string label;
    int count = 0;
  };
  int replicas_;
  std::mutex mutex_;
  std::unordered_map<int64_t, Seen> pending_;  // sequence -> first issuer, until all have issued
};

struct CollectiveRecord {
  int64_t sequence = 0;  // 1-based, per replica
  CollectiveFingerprint fingerprint;
  std::string label;     // e.g. "bucket 3", "parameter broadcast"
  std::chrono::steady_clock::time_point enqueued{};
  bool started = false;    // the stream has reached it (it waits for peers or runs)
  bool completed = false;
};

class RecordingCommunicator final : public Communicator {
 public:
  static constexpr size_t kRingSize = 64;

  RecordingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<DesyncChecker> checker);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Device device() const override { return inner_->device(); }
  std::string backend() const override { return inner_->backend(); }

  void all_reduce(const void* send, void* recv, size_t count, DType dtype, ReduceOp op,
                  Stream& stream) override;
  void reduce_scatter(const void* send, void* recv, size_t recv_count, DType dtype, ReduceOp op,
                      Stream& stream) override;
  void all_gather(const void* send, void* recv, size_t send_count, DType dtype,
                  Stream& stream) override;
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root,
                 Stream& stream) override;
  void group_start() override { inner_->group_start(); }
  void group_end() override { inner_->group_end(); }
  void abort() override { inner_->abort(); }

  // Names the next collective in the record ("bucket 3"); cleared by the call.
  void label_next(std::string label) override { next_label_ = std::move(label); }

  int64_t issued() const;
  // The recorded collectives, oldest first, with their started/completed state queried now.
  std::vector<CollectiveRecord> snapshot() const;

 private:
  struct Slot {
    CollectiveRecord record;
    std::unique_ptr<Event> start, end;
    // The sequence whose start/end the events hold (the slot's previous collective until
    // they are recorded again): snapshot() must not read a stale event as this one's.
    int64_t start_of = 0, end_of = 0;
  };
  // Checks, logs and brackets `call` (which enqueues the collective) with the slot's events.
  template <typename Call>
  void recorded(const CollectiveFingerprint& fingerprint, Stream& stream, Call&& call);

  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<DesyncChecker> checker_;
  std::string next_label_;
  mutable std::mutex mutex_;  // guards slots_' records and issued_
  std::array<Slot, kRingSize> slots_;
  int64_t issued_ = 0;
};

}  // namespace ls
