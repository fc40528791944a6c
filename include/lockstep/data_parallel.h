// DataParallel: the object an application holds to train one model on several devices (public).
//
// One Replica per device, each on its own long-lived thread that owns the device, its streams,
// its model copy and optimizer. Communicators are made together up front; replica 0's initial
// parameters are broadcast to all. step(batch) splits the global batch into contiguous shards
// (one per replica, near-equal when uneven shards are allowed), runs every replica's step at
// once and returns the global mean loss. One device is the same code path with N = 1.
// Failure: when a replica throws, every replica is aborted (communicators and streams), no
// thread is left blocked, and step() throws one ls::Error naming the replica, its device, the
// step, the phase and the original message, with the original's kind(). The object is unusable
// afterwards (destroy it). Hangs: a watchdog reports where every replica is when one waits in a
// collective longer than the timeout (TrainingOptions), then aborts all and throws that report
// (kind timeout). Desyncs (replicas issuing different collectives) are caught before they reach the
// backend (kind desync). Non-finite loss or gradients skip the step on every replica alike;
// max_consecutive_skips skipped steps in a row are an error (kind non_finite).
// Several processes (lockstep/world.h): built from a World, a DataParallel drives this process's
// devices as replicas first_replica(rank())..+local-1 of the world's replicas; every process
// builds it with the same model, options and seed and calls each method in the same order with
// the same arguments (step: the same GLOBAL batch, of which each replica takes its rows). A
// failure in any process ends every process's call with the original error (which names the
// process, replica, step and phase), without waiting for a timeout. Methods taking `replica`
// take a LOCAL index (0..local_size()-1).
// Thread-safety: call from one thread at a time. The implementation is private; this header
// includes only public headers.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/allocator.h>
#include <lockstep/device.h>
#include <lockstep/precision.h>
#include <lockstep/tensor.h>
#include <lockstep/hf_transformer.h>
#include <lockstep/checkpoint_retention.h>
#include <lockstep/data/dataset.h>
#include <lockstep/data/sampler.h>
#include <lockstep/buckets.h>
#include <lockstep/trainer.h>

namespace ls {

namespace nn {
class Loss;
class Module;
}  // namespace nn
namespace optim {
class Optimizer;
}  // namespace optim
class World;         // lockstep/world.h

// Builds one replica's model; called once on each replica's thread (current_replica() tells
// which). The optimizer factory builds an optimizer for the replica's flat parameter buffer
// (its state sized like it, zeroed on the stream).
using ModelFactory = std::function<std::unique_ptr<nn::Module>()>;
using OptimizerFactory =
    std::function<std::unique_ptr<optim::Optimizer>(const Tensor& params, Stream& stream)>;

// Factories for the common cases.
struct OptimizerSpec {
  std::string kind = "adamw";  // "adamw" or "sgd"
  float lr = 1e-3f;
  float momentum = 0.0f;       // sgd
  float weight_decay = 0.01f;  // adamw: decoupled; sgd: L2
};
OptimizerFactory make_optimizer_factory(const OptimizerSpec& spec);
// Linear layers of these widths with ReLU between them, e.g. {784, 256, 10}.
ModelFactory mlp_factory(std::vector<int64_t> widths);
// A transformer (lockstep/transformer_config.h); with `weights` (lockstep parameter
// names, e.g. from checkpoint::read_hf_weights), every parameter they hold starts from them.
ModelFactory transformer_factory(nn::TransformerConfig config,
                                 std::shared_ptr<const checkpoint::HostTensors> weights = nullptr);
// One such transformer, e.g. a child of an application's own model (Module::register_module):
// with config.hidden_states, the encoder whose hidden states the application's head reads.
std::unique_ptr<nn::Module> make_transformer(
    nn::TransformerConfig config, std::shared_ptr<const checkpoint::HostTensors> weights = nullptr);

// The rank of the replica whose thread calls it (model factories and model code may use it),
// or -1 on any other thread.
int current_replica();

// Where the optimizer's state lives. kOptimizer (ZeRO stage 1): the flat parameter buffer is
// split into one equal range per replica (padded: any parameter count on any device count);
// replica r keeps the optimizer state of range r only (1/N of it), steps that range after the
// gradient all-reduce, and an all-gather gives every replica the updated parameters. Results are
// bitwise those of kNone on the same devices (the update is element-wise on identical summed
// gradients). Checkpoints hold whole tensors either way and load into any mode and device count.
// kGradients (ZeRO stage 2): as kOptimizer, and replica r keeps only range r of the summed
// gradients too (1/N): no flat gradient buffer; each bucket's gradients live in a staging buffer
// while backward fills it and are then reduced to the replicas owning its pieces, bucket by
// bucket, overlapped with backward, after every micro-batch (so accumulate > 1 reduces
// accumulate times). Staging takes about three buckets' worth (BucketOptions::cap_bytes) at a
// time (on one device there is nothing to divide: it keeps the flat gradient buffer, as kNone).
// Bitwise kNone on host devices with accumulate == 1; with accumulate > 1 the sum over
// micro-batches and replicas is taken in another order (last-bit differences); on NCCL a
// reduce may sum in another order than an all-reduce (last-bit differences).
// kParameters (ZeRO stage 3, FSDP's full sharding): as kGradients, and replica r keeps only range
// r of the parameters too, so its model state is 1/N of the whole (16 bytes a parameter with f32
// AdamW: 4 value, 4 gradient, 8 optimizer, divided by N). A parameter's whole value is gathered
// (broadcast from the replicas owning its pieces) when a layer's forward first uses it, dropped at
// the layer's end, gathered again for its backward and dropped after its last use; the next
// parameter's gather is issued ahead, on the comm stream, to overlap the current layer's work
// (docs/architecture.md, "Data parallel"). Bitwise kGradients (the same values reach the
// same kernels). f32 only; steps run eagerly (no graphs); evaluation gathers layer by layer too,
// every replica running as many forwards as the one with the most rows. The parameters a forward
// pass uses must not depend on its data: every
// replica gathers the same ones in the same order (a replica that does not is a desync error).
enum class ShardMode { kNone, kOptimizer, kGradients, kParameters };
// "none", "optimizer", "gradients", "parameters"
const char* shard_mode_name(ShardMode mode);

// Seed, timeout, the skip limit, recompute, the loss and its contract check: TrainingOptions
// (lockstep/trainer.h), shared with PipelineOptions.
struct DataParallelOptions : TrainingOptions {
  BucketOptions buckets;
  ShardMode shard = ShardMode::kNone;
  int accumulate = 1;                // micro-batches per step; all-reduce after the last only
  bool allow_uneven_shards = false;  // global batch need not divide by the device count
  // Mixed precision (lockstep/precision.h): kBF16/kF16 round every matrix product's operands
  // (forward and backward) to 16 bits and accumulate in f32; parameters (master weights),
  // gradients, optimizer state and every other op stay f32. Gradients are all-reduced in f32
  // unless buckets.reduce_dtype says bf16.
  Precision precision = Precision::kF32;
  // kBF16 only: each replica keeps a bf16 copy of its weights (2 bytes per parameter), written by
  // the optimizer's own pass, which the products multiply with: weights are rounded once per
  // step, not in every product of every micro-batch. Results are bitwise the same either way;
  // false trades the copy's memory for that rounding.
  bool bf16_weight_copy = true;
  // kF16 only: the loss is scaled so that small gradients survive f16; dynamic by default (back
  // off on overflow, grow after a run of good steps, on the device). Saved in checkpoints.
  LossScaleConfig loss_scale;
  // After graph_warmup eager steps of one shape, capture a replica's step as a graph and launch
  // it for every later step of that shape (docs/architecture.md): results are bitwise the eager
  // ones. Steps of another shape run eagerly; models with dropout always do (said once each,
  // through `notice`). Unset: on, except on CUDA when this process drives more than one GPU
  // (docs/architecture.md, "Steps as graphs"); true or false decides it.
  std::optional<bool> graphs;
  int graph_warmup = 2;
  // step_async(): steps queued ahead of the host before it waits for the oldest (1 to 3).
  int steps_in_flight = 2;
  // Says why steps do not run as graphs (once per reason, from replica 0's thread, so it must be
  // thread-safe against the caller's own output); default: a line on stderr.
  std::function<void(const std::string&)> notice;
};

// Whether steps run as graphs when DataParallelOptions::graphs is unset, for the devices this
// process drives: false for several CUDA devices, else true.
bool graphs_by_default(const std::vector<Device>& local_devices);

class DataParallel final : public Trainer {
 public:
  DataParallel(std::vector<Device> devices, ModelFactory model, OptimizerFactory optimizer,
               DataParallelOptions options = {});
  // Every device of every process of `world` (World::init() first); one process: as above with
  // world.local_devices(). Collective over the processes. `world` must outlive this object.
  DataParallel(const World& world, ModelFactory model, OptimizerFactory optimizer,
               DataParallelOptions options = {});
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // One step, waited for: its result. Same as result(step_async(batch)).
  StepResult step(const data::Batch& batch) override;
  // Enqueues a step on every device and returns its number (1, 2, ...) without waiting for the
  // devices, unless options.steps_in_flight steps are already queued: then it first waits for
  // the oldest (every wait is bounded by the watchdog). `batch` may be reused once it returns.
  int64_t step_async(const data::Batch& batch) override;
  // The result of a step that step_async() returned and whose result was not taken yet, waiting
  // for it (and any earlier step) when needed. Non-finite steps are counted, and a run of
  // max_consecutive_skips raises, when their results arrive (so skipped_steps() counts the steps
  // whose results have arrived). Waiting is bounded by the watchdog and by a deadline of 3 x the
  // collective timeout + 2 s (a CUDA graph's collectives are invisible to the watchdog).
  StepResult result(int64_t step) override;
  // Graph launches so far on local replica 0, and the nodes of its graph (0: no graph yet).
  int64_t graph_launches() const;
  int64_t graph_nodes() const;
  // Whether steps may run as graphs: DataParallelOptions::graphs, or its default here.
  bool graphs() const override;
  // Splits the data set across the replicas and combines their counts.
  EvalResult evaluate(const data::Dataset& dataset, int64_t batch_size) override;

  int size() const;                            // replicas over every process
  int local_size() const;                      // replicas of this process
  const std::vector<Device>& devices() const override;  // this process's
  int64_t steps_taken() const override;
  int64_t skipped_steps() const override;
  int64_t parameter_count() const override;
  // "N gradient bucket(s)".
  std::string layout() const override;
  StepStats step_stats() const override;
  const std::vector<Bucket>& buckets() const;

  // Checkpoints: DIR/step-NNNNNN/{model,optimizer}.safetensors + meta.json, committed
  // atomically, DIR/latest naming the newest. Parameters are saved under their module paths
  // ("0.weight"), optimizer state as "<parameter>.<state>" ("0.weight.exp_avg"), so PyTorch's
  // safetensors reads them. save() returns the committed directory; load() takes DIR (follows
  // `latest`) or a step directory, checks every tensor's name, dtype and shape against this model
  // and optimizer, restores all replicas and the step count, and returns the data position to
  // continue from. File and disk errors are of kind io. save() first checks the disk has room
  // for the checkpoint (an io error naming the path, the bytes needed and the bytes free, with
  // nothing written), and after the commit removes the older checkpoints `retention` does not
  // keep (by default all but the newest 3; lockstep/checkpoint_retention.h).
  // Several processes: process 0 writes (gathering the other processes' optimizer ranges when
  // sharded) and every process returns its result or throws its error; load() reads DIR in every
  // process, so DIR must be visible to all of them (one machine, or a shared file system).
  std::string save(const std::string& dir, const TrainingPosition& position = {},
                   const CheckpointRetention& retention = {}) override;
  TrainingPosition load(const std::string& dir) override;

  // A host copy of replica r's flat parameter buffer (synchronizes that replica).
  std::vector<float> parameters(int replica);
  // Replica r's parameters one by one, under their module paths (e.g. to export a model).
  using NamedParameter = ls::NamedParameter;
  std::vector<NamedParameter> named_parameters(int replica);
  // Replica 0's (every replica holds the whole model).
  std::vector<NamedParameter> model_parameters() override;
  // Replica r's timeline of the last step (bucket all-reduces and end of backward).
  BucketTimeline last_timeline(int replica);
  // Every local device's input, compute, comm wait and idle over the steps harvested so far,
  // and the verdict (lockstep/device_use.h); measured on every step, at the cost of five clock
  // stamps per step and device.
  UseVerdict device_use() const override;
  UseVerdict device_use_all_processes() override;
  void trace_span(const std::string& thread, const std::string& name, int64_t begin_ns,
                  int64_t end_ns) override;
  AllocatorStats allocator_stats(int replica) const;
  // Bytes replica r's allocator handed out for each part of the training state (measured around
  // their construction, padding included): what sharding divides.
  struct StateBytes {
    int64_t parameters = 0;
    int64_t gradients = 0;
    int64_t optimizer = 0;
  };
  StateBytes state_bytes(int replica);

 private:
  class Impl;
  // The engine's own factories with test seams build one from an implementation.
  friend struct DataParallelAccess;
  explicit DataParallel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The step directory DIR/latest names, or nullopt when DIR holds no checkpoint yet; a broken
// `latest` is an ls::Error (kind io), never a silent fresh start.
std::optional<std::string> latest_checkpoint(const std::string& dir);

}  // namespace ls
