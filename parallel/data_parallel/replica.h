// Replica: one device's share of data-parallel training — its streams, its copy of the model,
// its optimizer, its communicator and its Reducer. Created, used and destroyed on its own
// WorkerThread (lockstep/data_parallel.h), so all of a device's state belongs to one thread.
//
// A step runs the shard's micro-batches forward and backward on the compute stream (the last
// one feeding the Reducer, so gradient all-reduces overlap its backward), then all-reduces the
// loss sum and counts non-finite values in the summed gradients. Every replica holds bitwise the
// same summed gradients and loss, so every replica takes the same decision: step the optimizer,
// or skip the step when anything is NaN/Inf (parameters stay bitwise equal across replicas).
// That decision is taken on the device (ops/step_control.h), so enqueueing a step never waits
// for the device: enqueue_step() returns once the step is queued, and outcome() reads its loss
// and decision later (Note [A step the host never waits on], replica.cpp). Gradients are scaled
// by 1/global_batch and summed, so the result equals one big batch whatever the shard sizes
// (uneven shards included).
// Graphs: after warm-up, a step of an unchanged shape is captured once and then launched as one
// graph (engine/core/graph.h; Note [The step as a graph], replica.cpp).
// Sharded (ZeRO): the optimizer steps this replica's range of the flat buffer and an all-gather
// spreads the updated ranges. ZeRO-2 also keeps only that range of the summed gradients: every
// micro-batch's buckets are reduced to their owners (Note [Sharded gradients], reducer.cpp), and
// the non-finite count of each range rides in the loss's all-reduce. ZeRO-3 keeps only that range
// of the values as well, and a ParameterGather brings each parameter's whole value to the tapes
// when they need it (Note [Sharded parameters], parameter_gather.cpp); nothing is all-gathered
// after the optimizer.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/precision.h>
#include <lockstep/nn/loss.h>
#include <lockstep/nn/module.h>
#include "engine/model/nn/parameter_store.h"
#include "engine/model/optim/optimizer.h"
#include "parallel/comm/communicator.h"
#include <lockstep/data_parallel.h>
#include "parallel/observability/flight_recorder.h"
#include "parallel/observability/layer_clock.h"
#include "parallel/comm/graph_communicator.h"
#include "parallel/data_parallel/parameter_gather.h"
#include "parallel/data_parallel/reducer.h"
#include "parallel/data_parallel/step_io.h"
#include "parallel/runtime/phase.h"
#include "parallel/runtime/shard.h"
#include "parallel/engine/worker_group.h"

namespace ls {

struct StepOutcome {
  double global_loss_sum = 0;  // sum over the GLOBAL batch of the per-label loss (all-reduced)
  int32_t nonfinite = 0;       // NaN/Inf values in the summed gradients
  bool skipped = false;        // the optimizer did not step (non-finite loss or gradients)
  float loss_scale = 1;        // the loss scale after the step (dynamic scaling: f16)
  int64_t optimizer_steps = 0;  // steps the optimizer has taken after this one
  bool graph = false;           // the step ran as a graph launch
  StepMarks marks;              // the step's timeline on this replica's device clock
  std::vector<int64_t> launch_ns;  // per bucket: its launch's start and end (Reducer::launch_marks)
  // Traced runs: each layer's stamps and what they are (DeviceLayerClock).
  std::vector<int64_t> layer_ns;
  std::shared_ptr<const LayerStamps> layer_points;
};

// How every replica runs its steps (from DataParallelOptions).
struct StepOptions {
  Precision precision = Precision::kF32;
  bool bf16_weight_copy = true;  // kBF16: Note [The bf16 copy of the weights]
  LossScaleConfig loss_scale;  // dynamic only with kF16
  bool graphs = true;          // capture and launch steps as graphs after warm-up
  int graph_warmup = 2;        // eager steps of a shape before it is captured
  std::chrono::milliseconds outcome_deadline{std::chrono::minutes(21)};
  // Says once why steps do not run as graphs (shape change, dropout, capture failure).
  std::function<void(const std::string&)> notice;
  std::shared_ptr<const nn::Loss> loss;  // never null (cross-entropy by default)
  bool check_loss_contract = true;
  // Tests (EngineHooks::before_upload): called on the replica's thread with its global rank just
  // before it stages a step's input, e.g. to stall one replica's input path.
  std::function<void(int rank)> before_upload;
  // Stamp every layer's forward and backward (DeviceLayerClock) for the trace.
  bool trace_layers = false;
  bool recompute = false;  // ForwardContext::recompute (DataParallelOptions::recompute)
};

// ZeRO-3: evaluation gathers each layer's parameters as it runs, a collective, so every replica
// runs the same number of forward passes, `forwards` (the most batches any replica has); one with
// fewer runs the rest on `filler` (a row of the data set) and counts nothing.
struct EvalLockstep {
  int64_t forwards = 0;
  Shard filler;
};

class Replica final : public GroupMember {
 public:
  // `comm` is the replica's communicator chain (decorators, if any, around `recorder`, the
  // flight recorder it owns, around the backend); `recorder` is read by the watchdog.
  // `shard` (ZeRO-1, ZeRO-2): the optimizer owns range `rank` of the flat parameter buffer only
  // (and ZeRO-2 that range of the summed gradients), and every step all-gathers the updated
  // ranges.
  Replica(int rank, Device device, const ModelFactory& model, const OptimizerFactory& optimizer,
          std::unique_ptr<Communicator> comm, RecordingCommunicator& recorder,
          const BucketOptions& buckets, uint64_t seed, ShardMode shard = ShardMode::kNone,
          StepOptions step_options = {});
  ~Replica() override;

  // Makes every replica start from rank 0's parameters (a collective: all replicas call it).
  void broadcast_parameters();
  // Enqueues step `step_index` (0-based) on this replica's shard of a global batch with
  // `global_labels` counted labels (the loss is their mean) and returns without waiting for the
  // device. `dropout_seed` keys the dropout masks. The shard's memory may be reused at return.
  // `global_rows`: the global batch's rows (every replica decides on graphs by it).
  void enqueue_step(const Shard& shard, int64_t global_rows, int64_t global_labels, int accumulate,
                    int64_t step_index, uint64_t dropout_seed);
  // Waits for an enqueued step (one of the last StepOutcomes::kSlots) and returns its outcome.
  StepOutcome outcome(int64_t step_index);
  // Both: one step, waited for.
  StepOutcome step(const Shard& shard, int64_t global_rows, int64_t global_labels, int accumulate,
                   int64_t step_index, uint64_t dropout_seed) {
    enqueue_step(shard, global_rows, global_labels, accumulate, step_index, dropout_seed);
    return outcome(step_index);
  }
  // The training state kept on the device (synchronizes): for checkpoints, and for the host's
  // decision when the optimizer does not read it itself (Optimizer::gated()).
  StepControl read_control();
  // Restores it (a loaded checkpoint): optimizer steps and the loss scale.
  void restore_control(int64_t optimizer_steps, float loss_scale, int32_t good_steps);
  // Graph launches and captures so far, and the nodes of the current graph (0: none).
  int64_t graph_launches() const { return graph_launches_; }
  int64_t graph_nodes() const { return graph_ ? graph_->nodes() : 0; }
  // `lockstep`: required with sharded parameters (ZeRO-3), ignored otherwise.
  EvalCounts evaluate(const Shard& rows, int64_t batch_size,
                      const EvalLockstep* lockstep = nullptr);

  int rank() const { return rank_; }
  Device device() const { return device_; }
  Phase phase() const { return phase_.load(); }
  nn::ParameterStore& store() { return *store_; }
  const nn::ParameterStore& store() const { return *store_; }
  bool sharded() const { return store_->shards() > 1; }
  bool gradients_sharded() const { return owned_grads_.defined(); }
  // The part of a flat buffer this replica's optimizer updates: all of it, or its shard.
  Tensor optimizer_range(const Tensor& flat) const {
    return sharded() ? store_->shard_view(flat, rank_) : flat;
  }
  DataParallel::StateBytes state_bytes() const { return state_bytes_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  RecordingCommunicator& communicator() { return recorder_; }
  const Reducer& reducer() const { return *reducer_; }
  // Host steady clock minus this device's clock, in nanoseconds (0 on host devices): what turns
  // its step marks into host time.
  int64_t clock_offset_ns() const { return clock_offset_ns_; }
  Stream& compute_stream() { return *compute_; }
  // The last step's timeline, relative to its start (valid after step() returned).
  // A CUDA graph does not record the events the timeline reads: steps run as graphs have none.
  Reducer::Timeline last_timeline() const {
    LS_CHECK(device_.is_host() || !last_step_graph_, "the bucket timeline of ", device_.str(),
             " is not recorded for steps that run as CUDA graphs; turn graphs off "
             "(DataParallelOptions::graphs = false, --no-graphs) to time the buckets");
    return reducer_->timeline(*step_start_);
  }
  // Ends every wait of this replica (any thread): its streams and its communicator.
  void abort() override;
  // Waits until both streams have run (or, after an abort, skipped) all enqueued work; errors
  // are ignored (they were reported already). After it, no enqueued work reads caller memory.
  void drain() override;
  std::string position() const override { return phase_name(phase()); }

 private:
  void upload(const Shard& shard);
  // The step's device work after the upload: what a graph captures.
  void step_body(const Shard& shard, int accumulate, const ForwardContext& context);
  // Forward and backward of the shard's micro-batches; adds each one's loss sum to loss_sum_.
  void forward_backward(const Shard& shard, int accumulate, const ForwardContext& context);
  void check_loss_contract(const Shard& shard, const ForwardContext& context);
  struct GraphShape {  // the global batch's: see Note [The step as a graph]
    int64_t rows = -1, features = -1, label_width = -1;
    int accumulate = -1;
    uint64_t input_layout = 0;  // named inputs' names, dtypes and shapes (0: images or tokens)
    bool operator==(const GraphShape&) const = default;
  };
  // Runs step_body as a graph when it may (capturing it first), else eagerly.
  void run_body(const GraphShape& shape, const Shard& shard, int accumulate,
                const ForwardContext& context);
  void capture_body(const Shard& shard, int accumulate, const ForwardContext& context);
  void notice_once(const std::string& message);
  // ZeRO-3: every parameter's whole value until the result goes (a collective); else null.
  std::unique_ptr<ParameterGather::WholeValues> whole_values();
  // The uploaded inputs of rows [begin, end) as the model's inputs.
  nn::Inputs input_rows(Tape& tape, const Shard& shard, int64_t begin, int64_t end) const;

  int rank_;
  Device device_;
  StepOptions step_options_;
  std::atomic<Phase> phase_{Phase::kSetup};
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> comm_stream_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<Communicator> comm_;
  GraphAwareCommunicator* graph_comm_ = nullptr;  // comm_ itself
  RecordingCommunicator& recorder_;  // inside comm_
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<ParameterGather> gather_;  // ZeRO-3 only
  std::unique_ptr<Event> step_start_;
  Tensor inputs_, labels_;  // device copies of the shard, reused across steps
  Tensor control_;          // i32 [kStepControlWords]: the StepControl
  StepControl control_host_;  // read_control / restore_control's host side of the copies
  StepInputs staging_;
  std::unique_ptr<StepOutcomes> outcomes_;
  std::unique_ptr<DeviceLayerClock> layer_clock_;  // traced runs only
  // Per outcome slot: the layer stamps its step exported (a graph launch: the capture's).
  std::shared_ptr<const LayerStamps> slot_layer_points_[StepOutcomes::kSlots];
  int64_t clock_offset_ns_ = 0;  // host steady clock - device clock (device_clock_offset_ns)
  // Graphs: the captured step and the shape it was captured for (its inputs are the tensors it
  // was captured reading; a step of another shape runs eagerly with its own).
  std::unique_ptr<StreamGraph> graph_;
  GraphShape graph_shape_;
  GraphShape warm_shape_;  // the shape of the eager steps counted in warm_steps_
  int warm_steps_ = 0;
  bool loss_contract_checked_ = false;
  bool graphs_possible_ = true;  // false once a step was step-dependent or a capture failed
  bool told_shape_change_ = false;
  int64_t graph_launches_ = 0;
  bool last_step_graph_ = false;
  bool graph_step_[StepOutcomes::kSlots] = {};  // per outcome slot: that step was a launch
  Tensor graph_inputs_, graph_labels_;
  Tensor owned_grads_;      // ZeRO-2: f32 [shard size], this replica's range of the summed grads
  // f32 [2]: this shard's loss sum, then (all-reduced) the global one; [1] counts the
  // non-finite summed gradients (ZeRO-2: this range's, then, all-reduced, all of them).
  Tensor loss_sum_;
  Tensor marks_;  // i32 [kStepMarkWords]: the step's timeline (parallel/observability/step_marks.h)
  DataParallel::StateBytes state_bytes_;
};

}  // namespace ls
