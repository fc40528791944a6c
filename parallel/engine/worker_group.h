// WorkerGroup: the one runtime under every strategy (internal). DataParallel's replicas and
// Pipeline's stages are its members; it owns what running them together takes, written once:
//   - one WorkerThread per member, on which the member is built, used and destroyed (its device
//     state belongs to that thread);
//   - run_on_all: a job on every member at once, watched from the calling thread. The first
//     job that throws, a stall (found by the strategy's StallDetector) or another process's
//     failure notice aborts every member, so none stays blocked waiting for the one that
//     failed; every stream is drained, so no device work still reads the caller's memory; and
//     one error names the member, its device, the step and where it was, with the original
//     message. The failure is kept: every later call raises it (the run is unusable);
//   - the heartbeat (a line on where every member is, every interval, while a job runs) and
//     telemetry (lockstep/parallel/observability/telemetry.h), the same for every strategy;
//   - the other processes of a World (ProcessGroup): their failures end this process's run too.
// Thread-safety: one calling thread at a time (the strategy's); abort_all() from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/trainer.h>
#include <lockstep/world.h>
#include "parallel/runtime/process_group.h"
#include "parallel/observability/telemetry.h"
#include "parallel/runtime/worker_thread.h"

namespace ls {

// What the runtime needs of a member (a Replica, a PipelineStage).
class GroupMember {
 public:
  virtual ~GroupMember() = default;
  // Ends every wait of the member (collectives, neighbours, streams) with an error. Any thread.
  virtual void abort() = 0;
  // Lets every stream of the member finish or skip its queued work. On the member's thread.
  virtual void drain() = 0;
  // Where the member's host thread is, for errors: "backward", "forward of micro-batch 2".
  virtual std::string position() const = 0;
};

// How a strategy tells that its running members are stuck: DataParallel watches its
// collectives (Watchdog), Pipeline the progress of its stages. Called from the watch loop only.
class StallDetector {
 public:
  using Clock = std::chrono::steady_clock;
  virtual ~StallDetector() = default;
  // How often check() is called while a job runs.
  virtual std::chrono::milliseconds period() const = 0;
  // A report when the members are stuck (the group then aborts them all), else nothing.
  virtual std::optional<std::string> check(Clock::time_point now) = 0;
  // Where every member is, in one line (the heartbeat's text).
  virtual std::string describe(Clock::time_point now) = 0;
};

struct WorkerGroupOptions {
  std::string strategy = "DataParallel";  // "destroy this DataParallel and build a new one"
  std::string member_noun = "replica";    // "a replica failed earlier"
  // Bounds the exchanges between processes (ProcessGroup).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Heartbeat and telemetry (lockstep/trainer.h), the strategy's options: the heartbeat is
  // called from the calling thread every heartbeat_interval while a job runs (0 or null: never).
  MonitorOptions monitor;
};

class WorkerGroup {
 public:
  // `names`: one per member, e.g. "replica 1 on host:1": its threads' error context and how
  // errors name it. `world` null: one process; else collective over its processes (every
  // process makes its runs' groups in the same order, see ProcessGroup). Raises ls::Error
  // (usage) for a telemetry interval that is not positive.
  WorkerGroup(const World* world, std::vector<std::string> names, WorkerGroupOptions options);
  // Destroys the members on their own threads, then joins the threads.
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  size_t size() const { return threads_.size(); }
  const std::string& name(size_t i) const { return names_[i]; }
  GroupMember& member(size_t i) { return *members_[i]; }
  const GroupMember& member(size_t i) const { return *members_[i]; }
  ProcessGroup& processes() { return *processes_; }
  bool several_processes() const { return processes_->several(); }
  const RunFailure& failure() const { return failure_; }

  // Makes member i on thread i, for every i. When any throws, aborts every member made,
  // destroys them and rethrows the first error.
  void build(const std::function<std::unique_ptr<GroupMember>(size_t)>& make);
  // Starts telemetry on `devices` (every member's, in order) when the options ask for it, into
  // monitor.telemetry_path (one file per process: process p > 0 writes PATH.process-p). Raises
  // ls::Error (io) when the file cannot be opened.
  void start_telemetry(const std::vector<Device>& devices);
  // The step telemetry records (the one being run).
  void set_telemetry_step(int64_t step);

  // Raises the run's failure when a member failed earlier.
  void check_usable(const char* what) const;
  // Runs job(i) on every member's thread and waits, watched (see the file comment). Errors:
  // "<name> failed in <what> (step <step>, <position>): <message>", or "<what> <step>:
  // <stall report>" (kind timeout), prefixed with the process on several processes.
  void run_on_all(const std::function<void(size_t)>& job, const char* what, int64_t step,
                  StallDetector& stalls);
  // Runs job on member i's thread and waits; its error propagates and the run stays usable
  // (reads and checkpoints).
  void run_on(size_t i, const std::function<void()>& job) { threads_[i]->post(job).get(); }
  template <typename T>
  T run_on(size_t i, const std::function<T()>& job) {
    T out{};
    run_on(i, [&] { out = job(); });
    return out;
  }
  // Runs job(i) on every member's thread and waits; returns the first error (not raised).
  std::exception_ptr run_each(const std::function<void(size_t)>& job) {
    return WorkerThread::run_each(threads_, job);
  }
  void abort_all();

 private:
  // Waits for every job; aborts all members at the first failure, another process's notice or
  // a stall (returns the stall's report then, else "").
  std::string watch(std::vector<std::future<void>>& jobs, const std::atomic<bool>& failed,
                    const char* what, int64_t step, StallDetector& stalls);
  void drain_all();
  void destroy();

  std::vector<std::string> names_;
  WorkerGroupOptions options_;
  RunFailure failure_;  // before processes_, which refers to it
  std::unique_ptr<ProcessGroup> processes_;
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::unique_ptr<GroupMember>> members_;
  std::unique_ptr<TelemetryRecorder> telemetry_;
};

}  // namespace ls
