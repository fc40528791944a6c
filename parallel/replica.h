// Replica: one device's share of data-parallel training — its streams, its copy of the model,
// its optimizer, its communicator and its Reducer. Created, used and destroyed on its own
// WorkerThread (parallel/data_parallel.h), so all of a device's state belongs to one thread.
//
// A step runs the shard's micro-batches forward and backward on the compute stream (the last
// one feeding the Reducer, so gradient all-reduces overlap its backward), then all-reduces the
// loss sum, counts non-finite values in the summed gradients and synchronizes once to read both.
// Every replica holds bitwise the same summed gradients and loss, so every replica takes the
// same decision: step the optimizer, or skip the step when anything is NaN/Inf (parameters stay
// bitwise equal across replicas). Gradients are scaled by 1/global_batch and summed, so the
// result equals one big batch whatever the shard sizes (uneven shards included).
// Sharded (ZeRO): the optimizer steps this replica's range of the flat buffer and an all-gather
// spreads the updated ranges. ZeRO-2 also keeps only that range of the summed gradients: every
// micro-batch's buckets are reduced to their owners (Note [Sharded gradients], reducer.cpp), and
// the non-finite count of each range rides in the loss's all-reduce.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "engine/model/nn/module.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/optim/optimizer.h"
#include "parallel/communicator.h"
#include "parallel/data_parallel.h"
#include "parallel/flight_recorder.h"
#include "parallel/reducer.h"

namespace ls {

// Where a replica is, for error messages and (later) the watchdog.
enum class Phase { kIdle, kSetup, kUpload, kForward, kBackward, kReduce, kOptimizer, kEvaluate };
const char* phase_name(Phase phase);

// A replica's rows of the global batch, in host memory owned by the caller: float inputs
// (images) or token ids, and label_width labels per row (kIgnoreLabel ones count for nothing).
struct Shard {
  const float* images = nullptr;    // rows * features, or null for token inputs
  const int32_t* tokens = nullptr;  // rows * features, or null for float inputs
  const int32_t* labels = nullptr;  // rows * label_width
  int64_t rows = 0;
  int64_t features = 0;
  int64_t label_width = 1;
  int64_t first_row = 0;  // global index of the first row (dropout masks)

  // The rows [begin, begin + count) of this shard.
  Shard slice(int64_t begin, int64_t count) const;
  // Labels that count for the loss (not kIgnoreLabel).
  int64_t counted_labels() const;
};

struct StepOutcome {
  double global_loss_sum = 0;  // sum over the GLOBAL batch of the per-label loss (all-reduced)
  int32_t nonfinite = 0;       // NaN/Inf values in the summed gradients
  bool skipped = false;        // the optimizer did not step (non-finite loss or gradients)
};

struct EvalCounts {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t rows = 0;  // labels counted (not kIgnoreLabel)
};

class Replica {
 public:
  // `comm` is the replica's communicator chain (decorators, if any, around `recorder`, the
  // flight recorder it owns, around the backend); `recorder` is read by the watchdog.
  // `shard` (ZeRO-1, ZeRO-2): the optimizer owns range `rank` of the flat parameter buffer only
  // (and ZeRO-2 that range of the summed gradients), and every step all-gathers the updated
  // ranges.
  Replica(int rank, Device device, const ModelFactory& model, const OptimizerFactory& optimizer,
          std::unique_ptr<Communicator> comm, RecordingCommunicator& recorder,
          const BucketOptions& buckets, uint64_t seed, ShardMode shard = ShardMode::kNone);
  ~Replica();

  // Makes every replica start from rank 0's parameters (a collective: all replicas call it).
  void broadcast_parameters();
  // Step `step_index` on this replica's shard of a global batch with `global_labels` counted
  // labels (the loss is their mean). `dropout_seed` keys the dropout masks.
  StepOutcome step(const Shard& shard, int64_t global_labels, int accumulate, int64_t step_index,
                   uint64_t dropout_seed);
  EvalCounts evaluate(const Shard& rows, int64_t batch_size);

  int rank() const { return rank_; }
  Device device() const { return device_; }
  Phase phase() const { return phase_.load(); }
  nn::ParameterStore& store() { return *store_; }
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
  Stream& compute_stream() { return *compute_; }
  // The last step's timeline, relative to its start (valid after step() returned).
  Reducer::Timeline last_timeline() const { return reducer_->timeline(*step_start_); }
  // Ends every wait of this replica (any thread): its streams and its communicator.
  void abort();
  // Waits until both streams have run (or, after an abort, skipped) all enqueued work; errors
  // are ignored (they were reported already). After it, no enqueued work reads caller memory.
  void drain();

 private:
  void upload(const Shard& shard);
  // Forward and backward of the shard's micro-batches; adds each one's loss sum to loss_sum_.
  void forward_backward(const Shard& shard, int64_t global_labels, int accumulate,
                        const ForwardContext& context);
  // The uploaded inputs of rows [begin, end) as the model's input Var.
  Var input_rows(Tape& tape, const Shard& shard, int64_t begin, int64_t end) const;

  int rank_;
  Device device_;
  std::atomic<Phase> phase_{Phase::kSetup};
  std::unique_ptr<Stream> compute_;
  std::unique_ptr<Stream> comm_stream_;
  std::unique_ptr<nn::Module> model_;
  std::unique_ptr<nn::ParameterStore> store_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<Communicator> comm_;
  RecordingCommunicator& recorder_;  // inside comm_
  std::unique_ptr<Reducer> reducer_;
  std::unique_ptr<Event> step_start_;
  Tensor inputs_, labels_;  // device copies of the shard, reused across steps
  Tensor owned_grads_;      // ZeRO-2: f32 [shard size], this replica's range of the summed grads
  // f32 [2]: this shard's loss sum, then (all-reduced) the global one; ZeRO-2: [1] counts the
  // non-finite summed gradients (this range's, then all of them).
  Tensor loss_sum_;
  Tensor nonfinite_;        // i32 [1]: non-finite values in the summed gradients (not ZeRO-2)
  DataParallel::StateBytes state_bytes_;
  float loss_sum_host_[2] = {0, 0};
  int32_t nonfinite_host_ = 0;
};

}  // namespace ls
