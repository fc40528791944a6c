// Trainer: what every training strategy offers, so a program drives data parallel and pipelines
// alike (DataParallel and Pipeline implement it): a step, steps queued and their results taken
// later, evaluation, checkpoints, the model's parameters, and counters. The results and the
// checkpoint position are plain structs shared by every strategy, and so are the options of
// what a run tells while it runs (MonitorOptions: heartbeat, telemetry).
// Thread-safety: one thread drives a trainer.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include <lockstep/device_use.h>
#include <lockstep/checkpoint_retention.h>
#include <lockstep/data/dataset.h>
#include <lockstep/data/sampler.h>
#include <lockstep/nn/loss.h>

namespace ls {

struct StepResult {
  // Mean over the global batch. A step skipped for a non-finite loss has that loss; one skipped
  // because its f16-scaled gradients overflowed (the loss scale then backs off) a finite one.
  float loss = 0.0f;
  bool skipped = false;  // non-finite loss or gradients: the optimizer did not step
  float loss_scale = 1.0f;  // after the step (f16's dynamic loss scale; else 1)
  bool graph = false;       // the step ran as a graph launch
};

// Where the data stream of a run stands, saved with checkpoints so a resumed run sees exactly
// the batches an uninterrupted one would (the sampler's order depends on seed and epoch only).
struct TrainingPosition {
  int64_t epoch = 0;
  int64_t batch_index = 0;  // batches already taken from that epoch
};

struct EvalResult {
  double loss = 0.0;      // mean over examples
  double accuracy = 0.0;  // fraction whose argmax is the label
  int64_t examples = 0;
};

// One parameter of the model under its module path ("h.0.attn.weight"), copied to the host.
struct NamedParameter {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> values;
};

// A Chrome trace-event file of some steps: Perfetto (ui.perfetto.dev: Open trace
// file) and chrome://tracing open it. Every device on the host's clock, one track per device
// stream and per host thread:
//   - each device's compute stream: each step's input, forward + backward with every layer the
//     model marks (Tape::begin_layer), the wait for the gradient sums, loss + optimizer (a
//     pipeline stage: each micro-batch's forward and backward, its gradient sums, the optimizer);
//   - each device's communication stream: each gradient bucket's all-reduce launch (its bytes,
//     and which buckets went out together);
//   - each device's host thread (the replica's or the stage's): issuing and collecting steps;
//   - the caller's thread: step enqueues, result waits, checkpoint saves, and the application's
//     own spans (Trainer::trace_span: lockstep-train's waits for the next batch);
//   - the application's other threads (Trainer::trace_span: lockstep-train's data loader);
//   - each device's memory in use, as a counter.
// Format and tracks: docs/device-use.md. Written once the last traced step's
// result has arrived, or when the trainer is destroyed with part of the range traced. Several
// processes: process p > 0 writes PATH.process-p (scripts/merge-traces joins them into one file).
struct TraceOptions {
  std::string path;         // empty: no trace
  int64_t first_step = 4;   // 1-based; the default skips the warm-up (and the graph's capture)
  int64_t last_step = 8;
};

// Activation checkpointing: kBlocks keeps only the input of each layer run through
// Tape::recomputable (each transformer block, each child of a Sequential, each block of your
// model that you run through it) and recomputes the layer's forward in backward: activation
// memory of one layer's intermediates instead of all of them, for about one more forward pass.
// The results are bitwise those of kNone.
enum class Recompute { kNone, kBlocks };
const char* recompute_name(Recompute recompute);  // "none", "blocks"

// Trainer::trace_span's name for the thread that calls step().
inline constexpr const char* kCallerThread = "caller";

// What a run tells while it runs, the same for every strategy (DataParallelOptions and
// PipelineOptions are both MonitorOptions).
struct MonitorOptions {
  // Called from the calling thread every heartbeat_interval while a step runs (0: never), with
  // where every replica or stage is: shows a live run is live.
  std::chrono::milliseconds heartbeat_interval{0};
  std::function<void(const std::string&)> heartbeat;
  // Telemetry (off when empty): every telemetry_interval, one JSON line per device appended to
  // this file and flushed to the disk: the step, memory in use and peak, and on GPUs power,
  // temperature, clocks and throttle reasons. A hang report names the file and the last sample
  // of each device. Several processes: process p > 0 writes PATH.process-p. Format:
  // docs/troubleshooting.md.
  std::string telemetry_path;
  std::chrono::milliseconds telemetry_interval{1000};
  // Where a hang (the watchdog's timeout) or a desync writes every replica's last collectives:
  // one JSON file per process, named in the error, that `lockstep-doctor --flight FILE...`
  // analyses (format: docs/troubleshooting.md). Empty: the system's temporary
  // directory. Written by every strategy (a pipeline's file holds its stages' collectives).
  std::string flight_recorder_dir;
  // A trace of some steps (off unless trace.path is set).
  TraceOptions trace;
};

// The last step, as every strategy reports it (Trainer::step_stats); a figure a strategy has no
// notion of stays empty.
struct StepStats {
  // A pipeline's bubble: the mean over its stages of the share of the step each waited, and
  // what its schedule's theory says (lockstep/pipeline_schedule.h).
  std::optional<double> bubble;
  std::optional<double> theoretical_bubble;
};

// What every strategy's options share (DataParallelOptions and PipelineOptions are both
// TrainingOptions): one name and one meaning for each.
struct TrainingOptions : MonitorOptions {
  uint64_t seed = 1;  // parameter initialisation, and dropout's masks
  // How long any wait on the other devices may last: a collective for its peers, a pipeline stage
  // for its neighbour's tensor, the run for any progress at all. Past it the watchdog aborts the
  // run and the step throws a report naming who was waiting for what (kind timeout).
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // A step whose loss or gradients are not finite is skipped (the parameters stay as they were);
  // this many in a row end the run with an error (kind non_finite). f16's dynamic loss scale
  // skips steps while it backs off: they count only once the scale is at its minimum.
  int max_consecutive_skips = 10;
  Recompute recompute = Recompute::kNone;  // activation checkpointing (above)
  // What the output is trained against (lockstep/nn/loss.h); null: cross-entropy on class labels.
  // The batch's targets must be of the loss's kind (labels or values).
  std::shared_ptr<const nn::Loss> loss;
  // A loss other than the built-in cross-entropy is checked once, at the first step, to be a sum
  // over rows (the contract of lockstep/nn/loss.h): its value over a step's rows must equal its
  // values over two halves of them. A few extra forward passes and a wait, once.
  bool check_loss_contract = true;
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  // One step, waited for: its result.
  virtual StepResult step(const data::Batch& batch) = 0;
  // Queues a step and returns its number (1, 2, ...); the strategy may wait for earlier steps
  // (DataParallel keeps a few in flight; Pipeline runs the step before returning). `batch` may
  // be reused once it returns.
  virtual int64_t step_async(const data::Batch& batch) = 0;
  // The result of a queued step whose result was not taken yet (each is returned once).
  virtual StepResult result(int64_t step) = 0;
  // The model on `dataset` (forward only), split across the devices, in chunks of batch_size.
  virtual EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size) = 0;

  // Checkpoints in one format for every strategy (DataParallel::save explains it): a checkpoint
  // of one loads into any other. save() returns the committed directory.
  virtual std::string save(const std::string& dir, const TrainingPosition& position,
                           const CheckpointRetention& retention) = 0;
  virtual TrainingPosition load(const std::string& dir) = 0;

  // The whole model's parameters, each once, under their module paths; synchronizes.
  virtual std::vector<NamedParameter> model_parameters() = 0;

  virtual const std::vector<Device>& devices() const = 0;  // this process's
  virtual int64_t steps_taken() const = 0;
  virtual int64_t skipped_steps() const = 0;  // non-finite loss or gradients
  virtual int64_t parameter_count() const = 0;
  // Whether steps may run as CUDA (or host) graphs.
  virtual bool graphs() const = 0;
  // How the model is spread, for logs: "3 gradient bucket(s)", "pipeline of 2 stages x 1".
  virtual std::string layout() const = 0;
  // What the last step's result said beyond its loss, the same struct for every strategy.
  virtual StepStats step_stats() const = 0;
  // How each device of this process spent the steps whose results have arrived, and the verdict
  // (lockstep/device_use.h). A strategy that does not measure says so (kNotMeasured).
  virtual UseVerdict device_use() const {
    UseVerdict verdict;
    verdict.sentence = "this strategy does not measure its devices' use yet";
    return verdict;
  }
  // device_use() over the devices of every process (under mpirun), each named with its process
  // ("host:1 (process 1)"): a collective that sums every device's parts across the processes,
  // so every process calls it at the same point of its run. One process: device_use().
  virtual UseVerdict device_use_all_processes() { return device_use(); }
  // A span of one of the application's threads on the trace (TraceOptions): a data loader's
  // work, a wait for data. `thread` names its track (kCallerThread: the thread that calls
  // step()); begin_ns and end_ns are steady_now_ns() times (lockstep/clock.h). Kept when the run
  // is traced and the span overlaps the traced steps. Without a trace, or once the file is
  // written, it returns at a branch; while tracing it takes a lock and stores the span (and
  // waits while the file is written). Any thread, while the trainer lives.
  virtual void trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                          int64_t end_ns) {
    (void)thread, (void)name, (void)begin_ns, (void)end_ns;
  }
};

}  // namespace ls
