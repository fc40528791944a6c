// Pipeline: pipeline-parallel training (public) — the model's layers cut into consecutive
// stages, one per device, each stage on its own thread with its own stream, like a Replica.
//
// The model's pipeline_layers() (lockstep/nn/module.h) are split near-equally by the number
// of layers holding parameters (lockstep/pipeline_schedule.h: split_layers). Each step splits the
// batch into micro_batches near-equal micro-batches and runs them through the stages in the
// chosen schedule (1F1B by default, GPipe or ZB-H1); activations and their gradients move between
// neighbouring stages by device-to-device copies ordered by events. Gradients accumulate over the
// micro-batches and every stage takes one optimizer step. The loss is the mean over the batch's
// counted labels, as in DataParallel, and the result equals a single-device DataParallel run on
// the same batch and seed (up to summation order): the same initial values (drawn for the whole
// model and sliced), and tied parameters (GPT's head = wte) kept on every stage that uses them,
// their gradients summed among those stages before the optimizer so all copies stay equal.
// With more devices than stages (a multiple), devices [r*p, r*p + p) form pipeline r; the batch
// is split into one contiguous shard per pipeline and stage s of every pipeline all-reduces its
// gradients with the others (data parallelism over pipelines).
// Failure: when a stage throws, or no stage makes progress for `timeout`, every stage is aborted
// and step() throws one ls::Error naming the stage, its device, the step, the micro-batch and the
// phase or transfer it was in, with the original message; the object is unusable afterwards.
// Heartbeat and telemetry (MonitorOptions, lockstep/trainer.h) work as in DataParallel: the
// two strategies run on one runtime.
// Several processes (lockstep/world.h): built from a World, every process drives whole pipelines
// on its own devices (each process's device count a multiple of the stages), pipelines numbered
// process-major, and stage s of every pipeline of every process all-reduces with the others;
// the batch, loss, evaluation, checkpoints and failures are shared as DataParallel shares them
// (the same global batch on every process; process 0 writes; a failure anywhere ends every
// process with the original error). Stages never span processes.
// Thread-safety: call from one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/pipeline_schedule.h>

namespace ls {

// Seed, timeout (also the bound of each wait for a neighbour's tensor), the skip limit, recompute,
// the loss and its contract check: TrainingOptions (lockstep/trainer.h), shared with
// DataParallelOptions.
struct PipelineOptions : TrainingOptions {
  int stages = 2;  // p; the device count must be a multiple of it
  int micro_batches = 4;
  // 1F1B, GPipe or ZB-H1 (lockstep/pipeline_schedule.h). ZB-H1 steps each stage's optimizer
  // without waiting for the others, copying its parameters and optimizer state first, and undoes
  // the step when another stage's gradients turn out non-finite (docs/pipeline.md): results
  // equal 1F1B's, bitwise.
  ScheduleKind schedule = ScheduleKind::k1F1B;
};

// Where the last step's time went, per stage (of pipeline 0).
struct PipelineStepStats {
  double step_ms = 0;             // wall time of forward + backward (to the last stage's sync)
  std::vector<double> busy_ms;    // per stage: its stream running forward/backward actions
  // Per stage: 1 - busy / step (under ZB-H1, whose stages step their optimizer before that sync,
  // 1 - busy / (step - the stage's optimizer time)).
  std::vector<double> bubble;
  double mean_bubble = 0;         // over the stages
  double theoretical_bubble = 0;  // the schedule's (lockstep/pipeline_schedule.h)
};

class Pipeline final : public Trainer {
 public:
  Pipeline(std::vector<Device> devices, ModelFactory model, OptimizerFactory optimizer,
           PipelineOptions options = {});
  // The local devices of every process of `world` (see above); collective over the processes.
  Pipeline(const World& world, ModelFactory model, OptimizerFactory optimizer,
           PipelineOptions options = {});
  ~Pipeline() override;
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  StepResult step(const data::Batch& batch) override;
  // A pipeline runs each step before returning (it keeps no steps in flight): step_async() is
  // step() keeping the result for result(), so programs drive both strategies alike.
  int64_t step_async(const data::Batch& batch) override;
  StepResult result(int64_t step) override;
  // Forward only: the data set split across the pipelines, each part streamed through its
  // stages in chunks of batch_size; the counts of the last stages combined (as
  // DataParallel::evaluate).
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size) override;

  int stages() const;
  int pipelines() const;        // over every process: devices / stages
  int local_pipelines() const;  // this process's (stage_parameters' `pipeline` counts these)
  const std::vector<Device>& devices() const override;
  int64_t steps_taken() const override;
  // Steps with non-finite loss or gradients: the optimizer did not step.
  int64_t skipped_steps() const override;
  int64_t parameter_count() const override;  // the model's, each tied parameter once
  bool graphs() const override { return false; }  // pipelines run every step eagerly
  // "pipeline of P stages x N".
  std::string layout() const override;
  StepStats step_stats() const override;
  // Every local stage's input, compute (its actions and optimizer), bubble (waiting for its
  // neighbours), comm wait (the all-reduce across pipelines, tied sums) and idle, and the verdict
  // (lockstep/device_use.h), against the schedule's own bubble.
  UseVerdict device_use() const override;
  UseVerdict device_use_all_processes() override;
  void trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                  int64_t end_ns) override;
  // The layers of each stage, by name ("h.0"), for logs.
  std::vector<std::vector<std::string>> stage_layers() const;
  PipelineStepStats last_step_stats() const;
  // The whole model's parameters in single-device (registration) order and names, each tied
  // parameter once (from the first stage holding it); synchronizes.
  std::vector<NamedParameter> named_parameters();
  std::vector<NamedParameter> model_parameters() override { return named_parameters(); }
  // The parameters one stage holds (of pipeline `pipeline`), tied copies included, in
  // registration order; synchronizes. For checking that every copy of a tied weight agrees.
  std::vector<NamedParameter> stage_parameters(int pipeline, int stage);
  // Checkpoints in DataParallel's format (see DataParallel::save/load): whole tensors under the
  // model's parameter names, each tied parameter once, so a pipeline checkpoint loads into a
  // DataParallel (any device count and shard mode) or a Pipeline of any stage count, and back.
  std::string save(const std::string& dir, const TrainingPosition& position = {},
                   const CheckpointRetention& retention = {}) override;
  TrainingPosition load(const std::string& dir) override;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
  std::map<int64_t, StepResult> untaken_;  // step_async()'s results not taken yet
};

}  // namespace ls
