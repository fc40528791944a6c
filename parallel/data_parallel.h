// DataParallel: the object an application holds to train one model on several devices.
//
// One Replica per device, each on its own long-lived thread that owns the device, its streams,
// its model copy and optimizer. Communicators are made together up front; replica 0's initial
// parameters are broadcast to all. step(batch) splits the global batch into contiguous shards
// (one per replica, near-equal when uneven shards are allowed), runs every replica's step at
// once and returns the global mean loss. One device is the same code path with N = 1.
// Failure: when a replica throws, every replica is aborted (communicators and streams), no
// thread is left blocked, and step() throws one ls::Error naming the replica, its device, the
// step, the phase and the original message. The object is unusable afterwards (destroy it).
// Hangs: a watchdog reports where every replica is when one waits in a collective longer than
// collective_timeout, then aborts all and throws that report. Desyncs (replicas issuing
// different collectives) are caught before they reach the backend. Non-finite loss or gradients
// skip the step on every replica alike; max_consecutive_skips skipped steps in a row are an error.
// Thread-safety: call from one thread at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/data/dataset.h"
#include "engine/core/error.h"
#include "engine/model/data/sampler.h"
#include "engine/model/optim/optimizer.h"
#include "parallel/replica.h"
#include "parallel/watchdog.h"
#include "parallel/worker_thread.h"

namespace ls {

struct DataParallelOptions {
  BucketOptions buckets;
  int accumulate = 1;                // micro-batches per step; all-reduce after the last only
  bool allow_uneven_shards = false;  // global batch need not divide by the device count
  uint64_t seed = 1;                 // parameter initialisation
  // How long one collective may wait for its peers before the watchdog aborts the run.
  std::chrono::milliseconds collective_timeout = std::chrono::minutes(10);
  int max_consecutive_skips = 10;    // non-finite steps in a row before it is an error
  // Called from the calling thread every heartbeat_interval while a step runs (0: never),
  // with where every replica is: shows a live run is live.
  std::chrono::milliseconds heartbeat_interval{0};
  std::function<void(const std::string&)> heartbeat;
  FaultInjection fault;              // tests: inject one fault (parallel/fault_injection.h)
};

struct StepResult {
  float loss = 0.0f;     // mean over the global batch (NaN/Inf when the step was skipped)
  bool skipped = false;  // non-finite loss or gradients: the optimizer did not step
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

class DataParallel {
 public:
  DataParallel(std::vector<Device> devices, ModelFactory model, OptimizerFactory optimizer,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  StepResult step(const data::Batch& batch);
  // Splits the data set across the replicas and combines their counts.
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size);

  int size() const { return static_cast<int>(devices_.size()); }
  const std::vector<Device>& devices() const { return devices_; }
  int64_t steps_taken() const { return steps_; }
  int64_t skipped_steps() const { return skipped_total_; }
  int64_t parameter_count() const { return parameter_count_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Checkpoints (parallel/checkpointing.cpp): DIR/step-NNNNNN/{model,optimizer}.safetensors +
  // meta.json, committed atomically, DIR/latest naming the newest. Parameters are saved under
  // their module paths ("0.weight"), optimizer state as "<parameter>.<state>" ("0.weight.exp_avg"),
  // so PyTorch's safetensors reads them. save() returns the committed directory; load() takes
  // DIR (follows `latest`) or a step directory, checks every tensor's name, dtype and shape
  // against this model and optimizer, restores all replicas and the step count, and returns the
  // data position to continue from.
  std::string save(const std::string& dir, const TrainingPosition& position = {});
  TrainingPosition load(const std::string& dir);

  // A host copy of replica r's flat parameter buffer (synchronizes that replica).
  std::vector<float> parameters(int replica);
  // Replica r's timeline of the last step (bucket all-reduces and end of backward).
  Reducer::Timeline last_timeline(int replica);
  AllocatorStats allocator_stats(int replica) const;

 private:
  // Runs job(replica) on every replica's thread and waits; on any failure aborts all replicas
  // and throws the first failure, described (see the class comment).
  void run_on_all(const std::function<void(Replica&)>& job, const char* what);
  // Runs job on replica r's thread and returns its result (for reads and checkpoints).
  template <typename T>
  T run_on(int replica, const std::function<T(Replica&)>& job) {
    LS_CHECK(replica >= 0 && replica < size(), "replica ", replica, " does not exist (", size(),
             " replicas)");
    T out{};
    threads_[static_cast<size_t>(replica)]
        ->post([&] { out = job(*replicas_[static_cast<size_t>(replica)]); })
        .get();
    return out;
  }
  std::vector<int64_t> shard_rows(int64_t global_rows) const;
  std::vector<ReplicaProgress> progress() const;
  void abort_all();
  void destroy_replicas();  // each on its own thread

  std::vector<Device> devices_;
  DataParallelOptions options_;
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::vector<Bucket> buckets_;
  int64_t parameter_count_ = 0;
  int64_t steps_ = 0;
  int64_t skipped_total_ = 0;
  int consecutive_skips_ = 0;
  std::string failure_;  // set once a replica has failed; every later call throws it
};

// Factories for the common cases.
struct OptimizerSpec {
  std::string kind = "adamw";  // "adamw" or "sgd"
  float lr = 1e-3f;
  float momentum = 0.0f;       // sgd
  float weight_decay = 0.01f;  // adamw: decoupled; sgd: L2
};
OptimizerFactory make_optimizer_factory(const OptimizerSpec& spec);
ModelFactory mlp_factory(std::vector<int64_t> widths);

}  // namespace ls
