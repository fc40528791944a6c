// DataParallel's implementation (internal; the public class is lockstep/data_parallel.h).
//
// Impl owns the replicas in a WorkerGroup (parallel/engine/worker_group.h), which runs every
// job on all of them together: watched (first failure, the Watchdog over the collectives,
// heartbeat, telemetry), all aborted on the first failure or hang, every stream drained, one
// error that names where it happened. Checkpoints live in parallel/data_parallel/checkpointing.cpp.
// Thread-safety: one calling thread at a time, like the public class.
#pragma once

#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/data_parallel.h>
#include "parallel/runtime/skip_policy.h"
#include "parallel/data_parallel/engine_hooks.h"
#include "parallel/runtime/process_group.h"
#include "parallel/data_parallel/replica.h"
#include "parallel/runtime/step_common.h"
#include "parallel/observability/device_use_meter.h"
#include "parallel/observability/fatal_signal_dump.h"
#include "parallel/observability/device_use_across_processes.h"
#include "parallel/observability/step_trace.h"
#include "parallel/observability/telemetry.h"
#include "parallel/observability/watchdog.h"
#include "parallel/engine/worker_group.h"
#include <lockstep/world.h>

namespace ls {

// A replica's training state in host memory (parallel/data_parallel/checkpointing.cpp).
struct HostState;

class DataParallel::Impl {
 public:
  // `world` null: one process driving `devices`; else world->local_devices() of every process.
  Impl(const World* world, std::vector<Device> devices, const ModelFactory& model,
       const OptimizerFactory& optimizer, DataParallelOptions options, const EngineHooks& hooks);
  ~Impl();  // replicas are destroyed on their own threads, then the threads are joined

  StepResult step(const data::Batch& batch) { return result(step_async(batch)); }
  int64_t step_async(const data::Batch& batch);
  StepResult result(int64_t step);
  // Waits for every queued step's result (kept for result()): before anything that reads or
  // replaces the training state (so the gap before the next step is not counted as idle).
  void finish_queued();
  int64_t graph_launches() const { return replica(0).graph_launches(); }
  int64_t graph_nodes() const { return replica(0).graph_nodes(); }
  bool graphs() const;  // See Note [Graphs with several GPUs in one process]
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size);
  std::string save(const std::string& dir, const TrainingPosition& position,
                   const CheckpointRetention& retention);
  TrainingPosition load(const std::string& dir);
  std::vector<float> parameters(int replica);
  DataParallel::StateBytes state_bytes(int replica);
  BucketTimeline last_timeline(int replica);
  AllocatorStats allocator_stats(int replica) const;
  UseVerdict device_use() const { return meter_->verdict(); }
  UseVerdict device_use_all_processes() {
    return judge_device_use(
        device_use_across_processes(meter_->devices(), replicas_total_, processes()));
  }

  int size() const { return replicas_total_; }
  int local_size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }
  int64_t steps_taken() const { return steps_; }  // enqueued
  int64_t skipped_steps() const { return skips_.skipped_total(); }
  int64_t parameter_count() const { return parameter_count_; }
  // Replica 0's parameters (names, shapes, offsets in the flat buffer; the same on every replica).
  const std::vector<Parameter*>& parameter_layout() const {
    return replica(0).store().parameters();
  }
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // Trainer::trace_span.
  void trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                  int64_t end_ns) {
    if (trace_) trace_->thread_span(thread, name, begin_ns, end_ns);
  }

  ShardMode shard() const { return options_.shard; }
 private:
  StepOptions step_options() const;
  void say_if_bf16_is_emulated() const;
  // Writes the flight recorder's file (parallel/observability/flight_dump.h) and returns the
  // sentence the error appends.
  std::string flight_note(std::string reason, std::vector<ReplicaProgress> progress,
                          const std::string& report, std::chrono::steady_clock::time_point now);
  void build_replicas(const ModelFactory& model, const OptimizerFactory& optimizer,
                      const EngineHooks& hooks);
  Replica& replica(size_t r) { return static_cast<Replica&>(group_->member(r)); }
  const Replica& replica(size_t r) const { return static_cast<const Replica&>(group_->member(r)); }
  // Runs job(replica) on every replica at once, watched by the Watchdog over the collectives
  // (WorkerGroup::run_on_all: on any failure every replica is aborted and one error raised).
  void run_on_all(const std::function<void(Replica&)>& job, const char* what);
  // Runs job on replica r's thread and returns its result (for reads and checkpoints).
  template <typename T>
  T run_on(int r, const std::function<T(Replica&)>& job) {
    check_replica(r);
    return group_->run_on<T>(static_cast<size_t>(r),
                             [&] { return job(replica(static_cast<size_t>(r))); });
  }
  void check_replica(int replica) const;
  ProcessGroup& processes() { return group_->processes(); }
  bool multiprocess() const { return group_->several_processes(); }
  // An exchange between the processes that fails the run when it throws (ProcessGroup).
  template <typename T>
  T between_processes(const std::function<T()>& exchange) {
    return processes().failing_run(exchange);
  }
  // Checkpoints (parallel/data_parallel/checkpointing.cpp).
  // Several processes, sharded state: process 0 gathers every process's ranges of `flats`.
  void gather_ranges(const std::vector<std::vector<float>*>& flats, int64_t shard_size,
                     const char* what);
  std::string commit(const std::string& dir, const TrainingPosition& position,
                     const CheckpointRetention& retention, const HostState& state);

  // Waits for the oldest queued step on every replica and accounts its result.
  void harvest_oldest();
  void start_trace();  // options_.trace (parallel/observability/step_trace.h)
  // A traced step's result arrived (waited for since wait_start_ns): its spans.
  void trace_step(int64_t step, const std::vector<StepOutcome>& outcomes, int64_t wait_start_ns);
  void check_usable(const char* what) const { group_->check_usable(what); }
  std::vector<int64_t> shard_rows(int64_t global_rows) const;
  std::vector<ReplicaProgress> progress();

  const World* world_ = nullptr;  // null: one process
  std::vector<Device> devices_;   // this process's
  int first_replica_ = 0;         // global index of devices_[0]'s replica
  int replicas_total_ = 0;        // over every process
  DataParallelOptions options_;
  // The replicas, their threads and the run's failure (declared before what reads them).
  std::unique_ptr<WorkerGroup> group_;
  std::vector<Bucket> buckets_;
  int64_t parameter_count_ = 0;
  std::string flight_note_;  // the flight recorder's sentence this run_on_all wrote, if any
  std::unique_ptr<DeviceUseMeter> meter_;  // every harvested step's marks
  std::unique_ptr<StepTrace> trace_;       // options_.trace, when a path is given
  // Writes the flight recorder if the process dies of a fatal signal (reset first on the way out).
  std::unique_ptr<FatalSignalDump> fatal_dump_;
  int64_t steps_ = 0;
  SkipPolicy skips_;
  struct QueuedStep {
    int64_t step;           // 1-based
    int64_t global_labels;  // the loss is the sum over these
  };
  int64_t harvesting_ = 0;  // the step whose result is being read (0: none)
  // The step progress reports and errors name: the one being read, else the next.
  int64_t reported_step() const { return harvesting_ > 0 ? harvesting_ : steps_ + 1; }
  std::deque<QueuedStep> queued_;          // enqueued, result not read from the devices yet
  std::map<int64_t, StepResult> results_;  // read, not taken by result() yet
  static constexpr size_t kKeptResults = 64;
  int64_t dropped_before_ = 0;  // results of steps below this were dropped untaken
};

}  // namespace ls
