// Pipeline's implementation (internal; the public class is lockstep/pipeline.h): the stages in a
// WorkerGroup (parallel/engine/worker_group.h: threads, failure, heartbeat, telemetry), the
// stall detector and the step (pipeline.cpp), and checkpoints (pipeline_checkpoint.cpp).
// Thread-safety: one calling thread at a time, like the public class.
#pragma once

#include <atomic>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <lockstep/pipeline.h>
#include "parallel/runtime/skip_policy.h"
#include "parallel/observability/device_use_meter.h"
#include "parallel/observability/fatal_signal_dump.h"
#include "parallel/observability/flight_dump.h"
#include "parallel/observability/device_use_across_processes.h"
#include "parallel/observability/step_trace.h"
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/runtime/process_group.h"
#include "parallel/engine/worker_group.h"

namespace ls {

class Pipeline::Impl {
 public:
  // `world` null: one process driving `devices`; else world->local_devices() of every process.
  Impl(const World* world, std::vector<Device> devices, const ModelFactory& model,
       const OptimizerFactory& optimizer, PipelineOptions options);
  ~Impl();  // writes a trace left short; group_ destroys the stages, each on its own thread

  StepResult step(const data::Batch& batch);
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size);
  std::vector<DataParallel::NamedParameter> named_parameters();
  std::vector<DataParallel::NamedParameter> stage_parameters(int pipeline, int stage);
  std::string save(const std::string& dir, const TrainingPosition& position,
                   const CheckpointRetention& retention);
  TrainingPosition load(const std::string& dir);

  int stages() const { return options_.stages; }
  int pipelines() const { return pipelines_total_; }
  int local_pipelines() const { return static_cast<int>(devices_.size()) / options_.stages; }
  const std::vector<Device>& devices() const { return devices_; }
  int64_t steps_taken() const { return steps_; }
  int64_t skipped_steps() const { return skips_.skipped_total(); }
  int64_t parameter_count() const { return parameter_count_; }
  std::vector<std::vector<std::string>> stage_layers() const { return stage_layer_names_; }
  PipelineStepStats last_step_stats() const { return stats_; }
  UseVerdict device_use() const {
    return meter_->verdict(
        theoretical_bubble(options_.stages, options_.micro_batches, options_.schedule));
  }
  UseVerdict device_use_all_processes() {
    return judge_device_use(
        device_use_across_processes(meter_->devices(), pipelines_total_ * options_.stages,
                                    processes()),
        theoretical_bubble(options_.stages, options_.micro_batches, options_.schedule));
  }

  // Trainer::trace_span.
  void trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                  int64_t end_ns) {
    if (trace_) trace_->thread_span(thread, name, begin_ns, end_ns);
  }

 private:
  void start_trace();
  // A step's stage timelines (and the optimizer's end on each): the meter, and the trace.
  void account_step(const std::vector<StageOutcome>& outcomes,
                    const std::vector<OptimizerSpan>& optimizers, int64_t start_ns,
                    int64_t end_ns);
  void plan(const ModelFactory& model);
  // Writes the checkpoint from this process's first pipeline (process 0's save).
  std::string commit(const std::string& dir, const TrainingPosition& position,
                     const CheckpointRetention& retention);
  void build_stages(const ModelFactory& model, const OptimizerFactory& optimizer);
  PipelineStage& stage(size_t index) { return static_cast<PipelineStage&>(group_->member(index)); }
  const PipelineStage& stage(size_t index) const {
    return static_cast<const PipelineStage&>(group_->member(index));
  }
  size_t stage_count() const { return group_->size(); }  // this process's: pipelines x stages
  // Runs job(index, stage) on every stage at once, watched for stalls (WorkerGroup::run_on_all:
  // on any failure every stage is aborted and one error raised).
  void run_on_stages(const std::function<void(size_t, PipelineStage&)>& job, const char* what);
  // Runs job on stage `index`'s thread and waits (reads and checkpoints; errors propagate).
  void run_on(int index, const std::function<void(PipelineStage&)>& job) {
    group_->run_on(static_cast<size_t>(index), [&] { job(stage(static_cast<size_t>(index))); });
  }
  ProcessGroup& processes() { return group_->processes(); }
  // The stall detector's parts: a number that changes whenever any stage makes progress (host
  // phases, device actions); where every stage is; the report naming the stalled stage.
  uint64_t progress_signature() const;
  int device_done(const PipelineStage& stage) const;  // actions of this step run on the device
  std::string describe_stages() const;
  // Where every stage is in the step's schedule (for the stall report and its flight record).
  std::vector<StageProgress> stage_progress() const;
  // The stall's report, naming the stage the others wait for, and the flight record's file
  // (kept in flight_note_).
  std::string stall_report(std::chrono::milliseconds quiet);
  // The flight record of where the stages stand (a stall's or a fatal signal's).
  FlightRecord stage_record(std::string reason, std::string report,
                            std::vector<StageProgress> stages) const;
  std::string where(int index) const;  // "stage 1 on host:1" (with "of pipeline r" if several)

  const World* world_ = nullptr;  // null: one process
  std::vector<Device> devices_;   // this process's
  PipelineOptions options_;
  std::unique_ptr<DeviceUseMeter> meter_;  // every step's stage timelines
  std::unique_ptr<StepTrace> trace_;       // options_.trace, when a path is given
  // Writes where every stage stood if the process dies of a fatal signal (reset first on the
  // way out).
  std::unique_ptr<FatalSignalDump> fatal_dump_;
  std::string flight_note_;  // the note of this run_on_stages' stall report, if it wrote one
  int first_pipeline_ = 0;   // global index of this process's first pipeline
  int pipelines_total_ = 0;  // over every process
  std::vector<std::pair<int, int>> ranges_;  // layers of each stage
  std::vector<std::vector<std::string>> stage_layer_names_;
  std::vector<std::string> parameter_names_;  // the whole model's, registration order
  std::vector<std::vector<int64_t>> parameter_shapes_;
  std::vector<TiedParameter> tied_;
  std::vector<std::vector<PipelineAction>> schedule_;
  // The stages (pipeline-major: r * p + s), their threads and the run's failure.
  std::unique_ptr<WorkerGroup> group_;
  int64_t parameter_count_ = 0;
  int64_t steps_ = 0;
  SkipPolicy skips_;
  PipelineStepStats stats_;
};

}  // namespace ls
