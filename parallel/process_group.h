// ProcessGroup: what one run (a DataParallel, a Pipeline) needs from the other processes of
// its World, beyond the replicas' communicators (internal).
//   - failure notices: a run that fails posts its error to every other process (post()); a run
//     whose watch loop sees a notice (notice()) aborts its replicas and raises that error, word
//     for word, so every process ends with the original error without waiting for a timeout;
//   - exchanges between the processes (mpi::allgather_doubles, ...) bounded by the run's timeout
//     and stopped by a notice;
//   - process 0's commits (checkpoints): it writes, and every process returns its result or
//     raises its error (the kind kept);
//   - the "process 1 of 2 on host-b: " prefix of this process's errors.
// With no World, or a World of one process, every call is local and nothing touches MPI.
// Thread-safety: the run's calling thread; notice() from its watch loop (the same thread).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/model/checkpoint/checkpoint.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/world.h"

namespace ls {

class ProcessGroup {
 public:
  // Collective over the processes of `world` when it has several: every process makes its
  // runs' groups in the same order (each takes the next failure-notice tag).
  ProcessGroup(const World* world, std::chrono::milliseconds timeout);

  bool several() const { return world_ != nullptr && world_->size() > 1; }
  const World* world() const { return world_; }
  int rank() const { return world_ != nullptr ? world_->rank() : 0; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  mpi::FailureChannel* channel() { return channel_.get(); }

  // "process 1 of 2 on host-b: " when several processes run, else "".
  std::string prefix() const;
  // Another process's failure, once one has arrived (tests for it, non-blocking).
  std::optional<mpi::FailureNotice> notice();
  // Sends this process's failure to the others (once; later calls do nothing).
  void post(ErrorKind kind, const std::string& message);

  // Process 0 runs `commit`; every process returns its result, or raises its error (kind
  // kept) prefixed on the others with `who` ("process 0 could not save the checkpoint: "). A
  // commit error leaves the run usable; an exchange that cannot complete fails it (failing_run).
  std::string on_process_zero(const std::function<std::string()>& commit, const char* what,
                              const std::string& who, std::string& failure, ErrorKind& kind);
  // Checkpoint `dir` read by every process itself: returns it when every process could read it,
  // else raises this process's own error or one naming the process that could not (kind io):
  // all processes load, or none. An exchange that cannot complete fails the run (failing_run);
  // a read error leaves it usable.
  checkpoint::LoadedCheckpoint read_checkpoint(const std::string& dir, std::string& failure,
                                               ErrorKind& kind);

  // Each process's values added element-wise, in process order (the same sums in every process,
  // bitwise); one process: `mine`. Fails the run like failing_run when the exchange cannot end.
  std::vector<double> sum_over_processes(std::span<const double> mine, const char* what,
                                         std::string& failure, ErrorKind& kind);
  // When another process's failure notice has arrived: makes it the run's failure (`failure`,
  // `kind`) and raises it, word for word. Returns otherwise.
  void raise_notice_if_any(std::string& failure, ErrorKind& kind);

  // Runs `exchange` (a call between the processes); when it throws (a timeout, another
  // process's notice), the run's `failure` and `kind` record it, the other processes are told,
  // and it is rethrown: the run is failed as by a replica's error.
  template <typename F>
  auto failing_run(F&& exchange, std::string& failure, ErrorKind& kind) -> decltype(exchange()) {
    try {
      return exchange();
    } catch (...) {
      failure = describe(std::current_exception());
      kind = kind_of(std::current_exception());
      post(kind, failure);
      throw;
    }
  }

 private:
  static std::string describe(const std::exception_ptr& error);
  static ErrorKind kind_of(const std::exception_ptr& error);

  const World* world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<mpi::FailureChannel> channel_;
};

}  // namespace ls
