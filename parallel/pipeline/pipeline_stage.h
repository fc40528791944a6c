// PipelineStage: one device's part of pipeline-parallel training — a consecutive range of the
// model's layers (nn::PipelineLayer), their parameters in a ParameterStore of their own, an
// optimizer over it, one compute stream, and an inbox its neighbours post tensors to. Created,
// used and destroyed on its own WorkerThread (parallel/pipeline/pipeline.cpp), like a Replica.
//
// run() executes the stage's actions of one step (lockstep/pipeline_schedule.h) on the compute
// stream: a forward receives the previous stage's activations (its stream waits on the sender's
// event, then copies them to this device) and posts its output to the next stage; a backward
// receives the output gradient and posts the input gradient back. Gradients accumulate over the
// micro-batches; a stage with data-parallel peers all-reduces its gradients with them, and then
// tied parameters held by several stages sum their gradients among those stages. step()
// applies the optimizer. Every host wait is bounded (StageInbox); abort() ends all of them.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/nn/module.h>
#include "engine/model/nn/parameter_store.h"
#include "engine/model/optim/optimizer.h"
#include "parallel/comm/communicator.h"
#include <lockstep/data_parallel.h>
#include <lockstep/pipeline_schedule.h>
#include "parallel/engine/worker_group.h"
#include "parallel/runtime/shard.h"
#include "parallel/pipeline/stage_inbox.h"
#include "parallel/observability/stage_timeline.h"

namespace ls {

enum class StagePhase {
  kIdle,
  kSetup,
  kUpload,
  kReceiveActivation,
  kForward,
  kSendActivation,
  kReceiveGradient,
  kBackward,
  kSendGradient,
  kWeightGradient,
  kTiedGradients,
  kReduce,
  kSynchronize,
  kOptimizer,
  kEvaluate
};
const char* stage_phase_name(StagePhase phase);  // "receive activations", "forward", ...

// A parameter that several stages hold (tied weights): its index in the model's parameter list
// and the stages holding it, ascending.
struct TiedParameter {
  int model_index = 0;
  std::vector<int> holders;
};

struct StageConfig {
  int stage = 0;
  int stages = 1;
  int first_layer = 0, end_layer = 0;  // [first, end) of the model's pipeline_layers()
  int micro_batches = 1;
  uint64_t seed = 1;
  std::chrono::milliseconds timeout{600000};  // the Pipeline's stall timeout
  std::vector<Device> pipeline;  // the devices of this stage's pipeline, stage order
  std::shared_ptr<const nn::Loss> loss;  // the last stage's; never null
  bool recompute = false;                // ForwardContext::recompute (PipelineOptions::recompute)
  ScheduleKind schedule = ScheduleKind::k1F1B;
  bool check_loss_contract = true;  // TrainingOptions::check_loss_contract (custom losses)
};

struct StageOutcome {
  double loss_sum = 0;  // last stage: sum of the per-label loss over this pipeline's rows
  int32_t nonfinite = 0;
  double busy_ms = 0;  // time the stream spent on forward and backward actions
  StageTimeline timeline;
};

class PipelineStage final : public GroupMember {
 public:
  // `dp_comm` (may be null): the communicator among the replicas of this stage.
  PipelineStage(const StageConfig& config, Device device, const ModelFactory& model,
                const OptimizerFactory& optimizer, std::unique_ptr<Communicator> dp_comm);
  ~PipelineStage() override;

  // Where the neighbours' inboxes are (index = stage; this pipeline's stages) and the tied
  // parameters this stage holds.
  void connect(std::vector<StageInbox*> inboxes, std::vector<TiedParameter> tied);
  StageInbox& inbox() { return inbox_; }

  // Forward and backward of this stage's actions on `shard` (its pipeline's rows, split into
  // micro_batches near-equal micro-batches), tied-gradient sums and the data-parallel reduce;
  // synchronizes once at the end. Under a schedule that splits backward (ZB-H1) it also takes
  // the optimizer step, before any other stage's result is known (post_validates()): step()
  // then keeps it or rolls it back.
  StageOutcome run(const Shard& shard, int64_t global_labels,
                   const std::vector<PipelineAction>& actions, int64_t step, uint64_t dropout_seed);
  // The optimizer step (synchronizes); then drops the tensors kept for the neighbours' copies.
  // Returns when the optimizer began and ended on the device's clock. Where run() stepped
  // already (post_validates()), `apply` false restores the parameters and optimizer state from
  // before that step (Note [Post-validation]).
  OptimizerSpan step(bool apply);
  bool post_validates() const { return splits_backward(config_.schedule); }
  // Host steady clock minus this device's clock (device_clock_offset_ns).
  int64_t clock_offset_ns() const { return clock_offset_ns_; }
  // Forward only over `rows` (this pipeline's part of a data set) in chunks of batch_size, the
  // activations passed stage to stage; the last stage returns the counts (the others, zeros).
  // Each chunk's input is needed on every stage (padding masks, pooling), so each uploads it.
  EvalCounts evaluate(const Shard& rows, int64_t batch_size);

  int stage() const { return config_.stage; }
  Device device() const { return device_; }
  StagePhase phase() const { return phase_.load(); }
  int micro_batch() const { return micro_batch_.load(); }
  // Actions whose work is enqueued in the current step (watch: with action_done, the device's
  // progress), and host progress ticks (any phase change).
  int actions_enqueued() const { return enqueued_.load(std::memory_order_acquire); }
  bool action_done(int k) const;  // action k of this step has run on the device
  uint64_t ticks() const { return ticks_.load(); }

  nn::ParameterStore& store() { return *store_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  Stream& compute_stream() { return *compute_; }
  // Model index (position in the whole model's parameters()) of each of this stage's parameters.
  const std::vector<int>& model_indices() const { return model_indices_; }
  // Ends every wait of this stage (any thread): its stream and its neighbours' messages.
  void abort() override;
  // Lets its stream finish or skip its queued work (its own thread).
  void drain() override;
  // "forward of micro-batch 2", or the phase alone outside a micro-batch.
  std::string position() const override;

 private:
  struct MicroBatch;
  void set_phase(StagePhase phase, int micro_batch);
  void build_parameters(nn::Module& model, const std::vector<nn::PipelineLayer>& layers);
  void upload(const Shard& shard);
  void forward(MicroBatch& mb, int action);
  void backward(MicroBatch& mb, int action);
  void weight_gradient(MicroBatch& mb, int action);
  // Post-validation: the optimizer's step taken in run(), kept or undone by step().
  void step_optimistically();
  void roll_back();
  // Waits for the message, makes the stream wait on its event, records `start` (if any) and
  // copies the tensor to this device.
  Tensor receive(StageInbox::Key key, const std::string& what, Event* start);
  void send(StageInbox::Key key, int to, const Tensor& tensor, const Event& ready);
  void sum_tied_gradients();
  // Evaluation: chunk c's activations through this stage, sent on (or, last, counted).
  void evaluate_chunk(const Shard& chunk, int c, EvalCounts& counts);
  void reduce_data_parallel();
  bool last() const { return config_.stage + 1 == config_.stages; }
  // Note [The loss contract] on the last stage's output of micro-batch `mb`: the custom loss over
  // its rows and over two halves of them (the stage's output split by examples; one wait).
  void check_loss_contract(const MicroBatch& mb, const Var& output, const Tensor& targets);
  // A wait for a neighbour is a backstop, later than the Pipeline's stall watch (which reports
  // where every stage is): twice its timeout and a second.
  std::chrono::milliseconds wait_bound() const {
    return 2 * config_.timeout + std::chrono::seconds(1);
  }

  StageConfig config_;
  Device device_;
  std::atomic<StagePhase> phase_{StagePhase::kSetup};
  std::atomic<int> micro_batch_{-1};
  std::atomic<int> enqueued_{0};
  std::atomic<uint64_t> ticks_{0};
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<nn::Module> model_;
  std::vector<nn::PipelineLayer> layers_;  // this stage's
  std::vector<int> model_indices_;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<Communicator> dp_comm_;
  StageInbox inbox_;
  std::vector<StageInbox*> inboxes_;
  std::vector<TiedParameter> tied_;
  // Per step: the micro-batches in flight, and events reused across steps (grown on demand).
  std::vector<MicroBatch> micro_;
  std::vector<std::unique_ptr<Event>> action_start_, action_end_, sent_;
  std::unique_ptr<Event> tied_ready_, tied_copied_;
  // Evaluation: per chunk slot (see Note [Evaluation window]), sent and copied.
  std::vector<std::unique_ptr<Event>> eval_sent_, eval_copied_;
  std::vector<Tensor> keep_alive_;  // see Note [Pipeline transfer lifetime]
  // Post-validation: the parameters and optimizer state before run()'s step, and where the
  // optimizer began and ended.
  std::vector<Tensor> before_step_;
  OptimizerSpan optimistic_span_;
  Tensor inputs_, labels_, loss_sum_, nonfinite_;
  Tensor loss_seed_;  // last stage, custom loss: 1 / global count, backward's root gradient
  bool loss_contract_checked_ = false;  // last stage: once, at its first micro-batch
  Shard shard_;
  int64_t global_labels_ = 1;
  ForwardContext context_;
  float loss_sum_host_ = 0;
  int32_t nonfinite_host_ = 0;
  // The step's stamps (i32 [12]: begin, input, actions end, optimizer begin and end, and under
  // post-validation the verdict's arrival) and their host copy; step_ref_ is recorded with the
  // input stamp, the origin of the actions' events.
  Tensor marks_;
  int64_t marks_host_[6] = {};
  std::unique_ptr<Event> step_ref_;
  int64_t clock_offset_ns_ = 0;
};

}  // namespace ls
