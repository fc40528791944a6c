// HostClique: the state the N ranks of one host communicator share — a descriptor slot per rank,
// a generation-counted barrier, the clique's sticky failure and per-rank progress counters.
//
// Every collective runs arrive() (publish + arrival barrier + desync check), its work phase with
// zero or more sync() barriers, and a final sync() (the exit barrier). See Note [Host collective
// phases] for which waits end on abort() and which only on the timeout.
// Thread-safety: every method may be called from any thread. The descriptors of peers (peer())
// may be read without a lock between a successful arrive() and that rank's exit sync().
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "parallel/comm/collective.h"

namespace ls {

class HostClique {
 public:
  HostClique(int size, std::chrono::milliseconds timeout);
  HostClique(const HostClique&) = delete;
  HostClique& operator=(const HostClique&) = delete;

  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Progress counters (for the watchdog): collectives issued by the rank's thread and completed
  // by its stream. A collective's sequence number is the rank's issued count after issuing it.
  int64_t issued(int rank) const;
  int64_t completed(int rank) const;
  int64_t note_issued(int rank);  // returns the new collective's sequence number

  // Publishes desc in slot `rank` and waits for every rank; the last to arrive checks that all
  // descriptors are the same collective (same_collective). Throws (without waiting) when the
  // clique has failed, on a desync, on the timeout, on abort, and when the rank's previous
  // collective is still running (its collectives were put on two unordered streams); in every
  // case no rank touches the buffers of this collective.
  void arrive(int rank, const CollectiveDesc& desc);
  // A barrier inside a collective whose arrive() succeeded on every rank (`phase` names it in a
  // timeout message). Ends only when all ranks reach it or on the timeout, not on abort().
  void sync(int rank, const CollectiveDesc& desc, const char* phase);
  // The exit barrier: sync(), then the rank's collective counts as completed and it may start
  // the next one.
  void depart(int rank, const CollectiveDesc& desc);
  // The descriptor rank k published in the current collective.
  const CollectiveDesc& peer(int k) const { return slots_[static_cast<size_t>(k)]; }
  // Scratch space for rank's work phase: size() pointers.
  const void** scratch(int rank) { return scratch_[static_cast<size_t>(rank)].data(); }

  // Marks the clique failed with `message` of `kind` (the first failure wins) and wakes every
  // waiter.
  void fail(std::string message, ErrorKind kind, const char* file, int line);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The failure message; empty while the clique is healthy.
  std::string failure_message() const;
  // Throws the clique's failure as an ls::Error of its kind (desync, timeout, aborted, usage)
  // carrying the calling thread's context.
  void throw_if_failed() const;

 private:
  enum class Phase { kArrival, kCommitted };
  struct alignas(64) RankCounters {
    std::atomic<int64_t> issued{0};
    std::atomic<int64_t> completed{0};
    std::atomic<bool> running{false};  // between arrive() and depart()
  };

  void barrier(int rank, const CollectiveDesc& desc, Phase phase, const char* phase_name);
  bool spin_until_released(uint64_t generation, Phase phase) const;
  void check_fingerprints_locked();
  std::string timeout_message_locked(const CollectiveDesc& desc, Phase phase,
                                     const char* phase_name) const;
  void fail_locked(std::string message, ErrorKind kind, const char* file, int line);
  [[noreturn]] void throw_failure_locked() const;

  const int size_;
  const std::chrono::milliseconds timeout_;
  std::unique_ptr<RankCounters[]> counters_;
  std::vector<CollectiveDesc> slots_;
  std::vector<std::vector<const void*>> scratch_;

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mutex_) when every rank has arrived
  int arrived_count_ = 0;                // ranks arrived in the current generation
  std::vector<char> arrived_;            // which ones
  std::atomic<bool> failed_{false};
  std::atomic<bool> broken_{false};  // a committed barrier timed out: its waiters must leave too
  std::string failure_;
  const char* failure_file_ = "";
  int failure_line_ = 0;
  ErrorKind failure_kind_ = ErrorKind::kInternal;
};

}  // namespace ls
