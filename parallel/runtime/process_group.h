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

#include <lockstep/error.h>
#include "engine/model/checkpoint/checkpoint.h"
#include "parallel/mpi/mpi_runtime.h"
#include <lockstep/world.h>

namespace ls {

// A run's failure: once set, the run is unusable and every later call raises it.
struct RunFailure {
  std::string message;  // "" while the run is usable
  ErrorKind kind = ErrorKind::kInternal;
  bool failed() const { return !message.empty(); }
};

class ProcessGroup {
 public:
  // Collective over the processes of `world` when it has several: every process makes its
  // runs' groups in the same order (each takes the next failure-notice tag). `failure` is the
  // run's, which the calls below set when the run fails; it must outlive this object.
  ProcessGroup(const World* world, std::chrono::milliseconds timeout, RunFailure& failure);

  bool several() const { return world_ != nullptr && world_->size() > 1; }
  const World* world() const { return world_; }
  int rank() const { return world_ != nullptr ? world_->rank() : 0; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  mpi::FailureChannel* channel() { return channel_.get(); }

  // "process 1 of 2 on host-b: " when several processes run, else "".
  std::string prefix() const;
  // Another process's failure, once one has arrived (tests for it, non-blocking).
  std::optional<mpi::FailureNotice> notice();
  // Fails the run: records (kind, message), tells the other processes (once) and raises it.
  [[noreturn]] void fail(ErrorKind kind, std::string message);

  // Process 0 runs `commit`; every process returns its result, or raises its error (kind
  // kept) prefixed on the others with `who` ("process 0 could not save the checkpoint: "). A
  // commit error leaves the run usable; an exchange that cannot complete fails it (failing_run).
  std::string on_process_zero(const std::function<std::string()>& commit, const char* what,
                              const std::string& who);
  // Checkpoint `dir` read by every process itself: returns it when every process could read it,
  // else raises this process's own error or one naming the process that could not (kind io):
  // all processes load, or none. An exchange that cannot complete fails the run (failing_run);
  // a read error leaves it usable.
  checkpoint::LoadedCheckpoint read_checkpoint(const std::string& dir);

  // Each process's values added element-wise, in process order (the same sums in every process,
  // bitwise); one process: `mine`. Fails the run like failing_run when the exchange cannot end.
  std::vector<double> sum_over_processes(std::span<const double> mine, const char* what);
  // When another process's failure notice has arrived: makes it the run's failure and raises
  // it, word for word. Returns otherwise.
  void raise_notice_if_any();

  // Runs `exchange` (a call between the processes); when it throws (a timeout, another
  // process's notice), the run fails with that error: recorded, told to the other processes
  // and rethrown.
  template <typename F>
  auto failing_run(F&& exchange) -> decltype(exchange()) {
    try {
      return exchange();
    } catch (...) {
      record(std::current_exception());
      throw;
    }
  }

 private:
  // Records `error` as the run's failure and tells the other processes.
  void record(const std::exception_ptr& error);

  const World* world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<mpi::FailureChannel> channel_;
  RunFailure& failure_;
};

}  // namespace ls
