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

#include "parallel/comm/collective.h"
#include "parallel/comm/communicator.h"

namespace ls {

// Compares collective #k across replicas as each replica issues it (same_collective on the
// descriptors). A mismatch raises an ls::Error of kind kDesync in the issuing thread, before the
// backend is called, naming both replicas and both collectives, instead of a hang or a silent
// corruption.
class DesyncChecker {
 public:
  explicit DesyncChecker(int replicas) : replicas_(replicas) {}
  // `desc.seq` is the collective's number on `replica`.
  void check(int replica, const CollectiveDesc& desc);

 private:
  struct Seen {
    CollectiveDesc desc;
    int replica = 0;
    int count = 0;
  };
  int replicas_;
  std::mutex mutex_;
  std::unordered_map<int64_t, Seen> pending_;  // sequence -> first issuer, until all have issued
};

struct CollectiveRecord {
  CollectiveDesc desc;  // seq (1-based, per replica) and label ("bucket 3") set
  std::chrono::steady_clock::time_point enqueued{};
  bool started = false;    // the stream has reached it (it waits for peers or runs)
  bool completed = false;
  bool in_graph = false;  // captured into a CUDA graph: issued once, not timed
  bool refused = false;   // the desync checker refused it: logged, never passed on
};

class RecordingCommunicator final : public CommunicatorDecorator {
 public:
  static constexpr size_t kRingSize = 64;

  RecordingCommunicator(std::unique_ptr<Communicator> inner,
                        std::shared_ptr<DesyncChecker> checker);

  // Names the next collective in the record ("bucket 3"); cleared by the call.
  void label_next(std::string label) override { next_label_ = std::move(label); }
  // See Note [A group's collectives end at its end].
  void group_start() override;
  void group_end() override;

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
  // Numbers, labels, checks and logs the collective, and brackets the inner communicator's call
  // with the slot's events.
  void issue(CollectiveDesc desc, Stream& stream) override;
  void record_end(int64_t sequence, Stream& stream);

  std::shared_ptr<DesyncChecker> checker_;
  int group_depth_ = 0;
  struct Unended {
    int64_t sequence;
    Stream* stream;
  };
  std::vector<Unended> unended_;  // the open group's collectives, their ends recorded at its end
  std::string next_label_;
  mutable std::mutex mutex_;  // guards slots_' records and issued_
  std::array<Slot, kRingSize> slots_;
  int64_t issued_ = 0;
};

}  // namespace ls
