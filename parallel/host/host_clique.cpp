// HostClique (see parallel/host/host_clique.h): descriptor slots, the barrier, failures.
#include "parallel/host/host_clique.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include <lockstep/error.h>

namespace ls {
namespace {

using Clock = std::chrono::steady_clock;

// A waiter first spins this long (peers usually arrive within microseconds when the ranks are
// in step), then blocks on the condition variable in slices, so that a failure flag or the
// timeout is noticed even if a notification were missed.
constexpr auto kSpinTime = std::chrono::microseconds(5);
constexpr auto kWaitSlice = std::chrono::milliseconds(20);

#if defined(__x86_64__) || defined(__i386__)
inline void cpu_relax() { __builtin_ia32_pause(); }
#elif defined(__aarch64__)
inline void cpu_relax() { asm volatile("yield" ::: "memory"); }
#else
inline void cpu_relax() { std::this_thread::yield(); }
#endif

std::string seq_str(int64_t seq) {
  std::ostringstream out;
  if (seq == 0) {
    out << "none";
  } else {
    out << "#" << seq;
  }
  return out.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << (ranks.size() == 1 ? "rank " : "ranks ");
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  return out.str();
}

}  // namespace

// Note [Host collective phases]
// A collective is arrive() (publish the descriptor, wait for all ranks, check fingerprints),
// the work phase (each rank reads its peers' buffers and writes its own), and the exit sync().
// Until arrive() has released every rank, nobody has touched memory, so a failure (desync,
// timeout, abort, or an earlier failure) simply makes every waiter throw. Once it has released
// them the collective is committed: every rank is in a finite memory loop, and a peer may be
// reading this rank's buffers until the exit barrier. If a waiter in sync() left on abort(),
// its caller could free or reuse buffers a peer is still reading. So sync() ignores abort() and
// only ends when all ranks arrive (bounded: they are all running plain loops) or, as a safety
// net, on the timeout (which also breaks the barrier for the other waiters of that sync()).
// A barrier that released its waiters (generation moved on) is passed even if the clique failed
// meanwhile; the failure is seen at the next arrive().

HostClique::HostClique(int size, std::chrono::milliseconds timeout)
    : size_(size),
      timeout_(timeout),
      counters_(std::make_unique<RankCounters[]>(static_cast<size_t>(size))),
      slots_(static_cast<size_t>(size)),
      scratch_(static_cast<size_t>(size), std::vector<const void*>(static_cast<size_t>(size))),
      arrived_(static_cast<size_t>(size), 0) {
  // make_host_communicators checked both (check_clique_devices).
  LS_ASSERT(size >= 1, "a host clique needs at least one rank, got ", size);
  LS_ASSERT(timeout.count() > 0, "the timeout must be positive, got ", timeout.count(), " ms");
}

int64_t HostClique::issued(int rank) const {
  return counters_[static_cast<size_t>(rank)].issued.load(std::memory_order_acquire);
}

int64_t HostClique::completed(int rank) const {
  return counters_[static_cast<size_t>(rank)].completed.load(std::memory_order_acquire);
}

int64_t HostClique::note_issued(int rank) {
  return counters_[static_cast<size_t>(rank)].issued.fetch_add(1, std::memory_order_acq_rel) + 1;
}

void HostClique::arrive(int rank, const CollectiveDesc& desc) {
  barrier(rank, desc, Phase::kArrival, "arrival");
}

void HostClique::sync(int rank, const CollectiveDesc& desc, const char* phase) {
  barrier(rank, desc, Phase::kCommitted, phase);
}

void HostClique::depart(int rank, const CollectiveDesc& desc) {
  barrier(rank, desc, Phase::kCommitted, "exit");
  RankCounters& counters = counters_[static_cast<size_t>(rank)];
  counters.completed.store(desc.seq, std::memory_order_release);
  counters.running.store(false, std::memory_order_release);
}

bool HostClique::spin_until_released(uint64_t generation, Phase phase) const {
  const auto until = Clock::now() + kSpinTime;
  do {
    for (int i = 0; i < 16; ++i) {
      if (generation_.load(std::memory_order_acquire) != generation) return true;
      cpu_relax();
    }
    if (phase == Phase::kArrival && failed()) return false;
  } while (Clock::now() < until);
  return false;
}

void HostClique::barrier(int rank, const CollectiveDesc& desc, Phase phase,
                         const char* phase_name) {
  const auto start = Clock::now();
  uint64_t generation;
  {
    std::unique_lock lock(mutex_);
    if (phase == Phase::kArrival) {
      if (failed()) throw_failure_locked();  // sticky: never wait on a failed clique
      if (counters_[static_cast<size_t>(rank)].running.exchange(true, std::memory_order_acq_rel)) {
        const CollectiveDesc& running = slots_[static_cast<size_t>(rank)];
        fail_locked(
            detail::concat("rank ", rank, " started ", describe(desc), " while its ",
                           describe(running),
                           " was still running; a communicator's "
                           "collectives run one at a time: issue them on one stream, or "
                           "order the streams with events"),
            ErrorKind::kUsage, __FILE__, __LINE__);
        cv_.notify_all();
        throw_failure_locked();
      }
      slots_[static_cast<size_t>(rank)] = desc;
    } else if (broken_.load(std::memory_order_relaxed)) {
      throw_failure_locked();
    }
    generation = generation_.load(std::memory_order_relaxed);
    LS_ASSERT(!arrived_[static_cast<size_t>(rank)], "rank ", rank, " arrived twice at a barrier");
    arrived_[static_cast<size_t>(rank)] = 1;
    if (++arrived_count_ == size_) {
      if (phase == Phase::kArrival) check_fingerprints_locked();  // throws on a desync
      arrived_count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), 0);
      generation_.store(generation + 1, std::memory_order_release);
      lock.unlock();
      cv_.notify_all();
      return;
    }
  }
  if (spin_until_released(generation, phase)) return;

  std::unique_lock lock(mutex_);
  while (true) {
    if (generation_.load(std::memory_order_relaxed) != generation) return;
    if (phase == Phase::kArrival ? failed() : broken_.load(std::memory_order_relaxed)) {
      throw_failure_locked();
    }
    const auto now = Clock::now();
    if (now - start >= timeout_) {
      fail_locked(timeout_message_locked(desc, phase, phase_name), ErrorKind::kTimeout, __FILE__,
                  __LINE__);
      if (phase == Phase::kCommitted) broken_.store(true, std::memory_order_relaxed);
      lock.unlock();
      cv_.notify_all();
      lock.lock();
      throw_failure_locked();
    }
    cv_.wait_for(lock, std::min<Clock::duration>(kWaitSlice, start + timeout_ - now));
  }
}

void HostClique::check_fingerprints_locked() {
  const CollectiveDesc& first = slots_[0];
  for (int k = 1; k < size_; ++k) {
    const CollectiveDesc& other = slots_[static_cast<size_t>(k)];
    if (same_collective(first, other)) continue;
    std::ostringstream message;
    message << "collective desync at #" << first.seq << ": rank 0 issued " << describe(first)
            << " but rank " << k << " issued " << describe(other);
    if (other.seq != first.seq) message << " (one rank skipped or added a call)";
    message << "; every rank must issue the same collectives in the same order with the same "
               "counts, dtypes, ops and roots";
    fail_locked(message.str(), ErrorKind::kDesync, __FILE__, __LINE__);
    cv_.notify_all();  // waiters re-check the flag under the mutex we hold
    throw_failure_locked();
  }
}

std::string HostClique::timeout_message_locked(const CollectiveDesc& desc, Phase phase,
                                               const char* phase_name) const {
  std::vector<int> arrived, missing;
  for (int k = 0; k < size_; ++k) {
    (arrived_[static_cast<size_t>(k)] ? arrived : missing).push_back(k);
  }
  std::ostringstream out;
  out << "timeout after " << timeout_.count() << " ms in " << describe(desc);
  if (phase == Phase::kCommitted) out << " (" << phase_name << " barrier)";
  out << ": " << rank_list(arrived) << " arrived, " << rank_list(missing) << " did not";
  // Per missing rank: how far it got, and whether its thread or its stream is behind.
  const auto diagnose = [&](int k) {
    std::ostringstream why;
    why << "last completed collective is " << seq_str(completed(k));
    if (phase == Phase::kCommitted) return why.str();
    if (issued(k) < desc.seq) {
      why << " and it has not issued #" << desc.seq << " (its thread is behind, stuck or skipped "
          << "the call)";
    } else {
      why << " and it has issued #" << desc.seq << " but its stream has not run it (busy, "
          << "blocked, or skipping work after an earlier error)";
    }
    return why.str();
  };
  if (missing.size() == 1) {
    out << " (its " << diagnose(missing[0]) << ")";
  } else {
    for (size_t i = 0; i < missing.size(); ++i) {
      out << (i ? "; rank " : " (rank ") << missing[i] << ": " << diagnose(missing[i]);
    }
    out << ")";
  }
  return out.str();
}

void HostClique::fail(std::string message, ErrorKind kind, const char* file, int line) {
  {
    std::lock_guard lock(mutex_);
    fail_locked(std::move(message), kind, file, line);
  }
  cv_.notify_all();
}

void HostClique::fail_locked(std::string message, ErrorKind kind, const char* file, int line) {
  if (failed()) return;  // the first failure is the cause; later ones are consequences
  failure_ = std::move(message);
  failure_kind_ = kind;
  failure_file_ = file;
  failure_line_ = line;
  failed_.store(true, std::memory_order_release);
}

std::string HostClique::failure_message() const {
  std::lock_guard lock(mutex_);
  return failure_;
}

void HostClique::throw_if_failed() const {
  if (!failed()) return;
  std::unique_lock lock(mutex_);
  throw_failure_locked();
}

void HostClique::throw_failure_locked() const {
  throw Error(failure_, failure_file_, failure_line_, thread_error_context(), failure_kind_);
}

}  // namespace ls
