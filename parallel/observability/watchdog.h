// Watchdog: notices a replica stuck in one collective longer than the timeout and describes
// where every replica is, e.g.
//   "replica 1 (host:1) waits in all_reduce #42 (bucket 3, 1.0 MiB) [f32, count=262144, sum]
//    for 1.0 s; replica 0 (host:0) never issued #42: its last completed collective is #41 and it
//    is in forward of step 17" (collectives as describe() in
//    parallel/comm/collective.h writes them)
// It only reads progress (flight recorder snapshots, phases); DataParallel acts on its verdict
// (aborts every replica and throws the report). Thread-safety: one thread (DataParallel's).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include "parallel/observability/flight_recorder.h"
#include "parallel/runtime/phase.h"

namespace ls {

struct ReplicaProgress {
  int rank = 0;
  Device device;
  Phase phase = Phase::kIdle;
  int64_t step = 0;  // the step being run (1-based)
  std::vector<CollectiveRecord> records;  // oldest first
  std::string waiting_for;  // whom its collective still awaits, when the backend knows
};

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Watchdog(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  // The report when some replica has been inside one collective longer than the timeout.
  std::optional<std::string> check(const std::vector<ReplicaProgress>& replicas,
                                   Clock::time_point now);
  // Where every replica is now (for heartbeats and reports).
  std::string describe(const std::vector<ReplicaProgress>& replicas, Clock::time_point now) const;

 private:
  std::chrono::milliseconds timeout_;
  // When each (replica, sequence) was first seen started and not completed.
  // (position in the progress list, collective seq) -> when the watchdog first saw it waiting
  std::map<std::pair<int, int64_t>, Clock::time_point> started_at_;
};

}  // namespace ls
