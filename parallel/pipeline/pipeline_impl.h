// Pipeline's implementation (internal; the public class is lockstep/pipeline.h): the stages,
// their threads, running a job on every stage with failure and stall handling (pipeline.cpp),
// and checkpoints (pipeline_checkpoint.cpp).
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
#include "parallel/pipeline/pipeline_stage.h"
#include "parallel/comm/process_group.h"
#include "parallel/runtime/worker_thread.h"

namespace ls {

class Pipeline::Impl {
 public:
  // `world` null: one process driving `devices`; else world->local_devices() of every process.
  Impl(const World* world, std::vector<Device> devices, const ModelFactory& model,
       const OptimizerFactory& optimizer, PipelineOptions options);
  ~Impl() { destroy_stages(); }

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
  int64_t skipped_steps() const { return skipped_total_; }
  int64_t parameter_count() const { return parameter_count_; }
  std::vector<std::vector<std::string>> stage_layers() const { return stage_layer_names_; }
  PipelineStepStats last_step_stats() const { return stats_; }

 private:
  struct Failure {
    int stage = -1;  // index into stages_ (pipeline * p + stage)
    std::exception_ptr error;
    StagePhase phase = StagePhase::kIdle;
    int micro_batch = -1;
  };
  void plan(const ModelFactory& model);
  // Writes the checkpoint from this process's first pipeline (process 0's save).
  std::string commit(const std::string& dir, const TrainingPosition& position,
                     const CheckpointRetention& retention);
  void build_stages(const ModelFactory& model, const OptimizerFactory& optimizer);
  void run_on_stages(const std::function<void(PipelineStage&)>& job, const char* what);
  std::string watch(std::vector<std::future<void>>& jobs, const std::atomic<bool>& failed);
  uint64_t progress_signature() const;
  int device_done(const PipelineStage& stage) const;
  std::string stall_report(std::chrono::milliseconds quiet) const;
  [[noreturn]] void fail(const Failure& first, const std::string& stuck, const char* what);
  void abort_all();
  void drain_all();
  void destroy_stages();
  std::string where(int index) const;  // "stage 1 on host:1" (with "of pipeline r" if several)
  // Runs job on stage `index`'s thread and waits (reads and checkpoints; errors propagate).
  void run_on(int index, const std::function<void(PipelineStage&)>& job) {
    threads_[static_cast<size_t>(index)]->post([&] { job(*stages_[static_cast<size_t>(index)]); }).get();
  }

  const World* world_ = nullptr;  // null: one process
  std::vector<Device> devices_;   // this process's
  PipelineOptions options_;
  int first_pipeline_ = 0;   // global index of this process's first pipeline
  int pipelines_total_ = 0;  // over every process
  std::unique_ptr<ProcessGroup> processes_;
  std::vector<std::pair<int, int>> ranges_;  // layers of each stage
  std::vector<std::vector<std::string>> stage_layer_names_;
  std::vector<std::string> parameter_names_;  // the whole model's, registration order
  std::vector<std::vector<int64_t>> parameter_shapes_;
  std::vector<TiedParameter> tied_;
  std::vector<std::vector<PipelineAction>> schedule_;
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::unique_ptr<PipelineStage>> stages_;  // pipeline-major: r * p + s
  int64_t parameter_count_ = 0;
  int64_t steps_ = 0;
  int64_t skipped_total_ = 0;
  PipelineStepStats stats_;
  RunFailure failure_;  // set once a stage has failed; every later call raises it
};

}  // namespace ls
