// Planner (public): for a model and a machine, predicts what each parallel strategy costs per
// device (parameters, gradients, optimizer state, activations, total) and per step (time), and
// recommends one.
//
// Strategies, in the order they are tried: data parallel (ShardMode::kNone), ZeRO-1
// (kOptimizer), ZeRO-2 (kGradients), ZeRO-3 (kParameters), the same four with activation
// checkpointing
// (Recompute::kBlocks: only when sharding alone does not fit, as it costs compute; when the
// profile measured it), then pipelines with p = 2, 4, 8, ... stages (p dividing the
// device count, p <= the model's pipeline layers that hold parameters), each with devices / p
// pipelines (data parallel over pipelines). RULE: the recommendation is the FIRST strategy in that
// order that can run the batch at all (DataParallel's and Pipeline's rules on the batch, the
// devices, micro-batches and accumulation) and whose predicted bytes per device fit in headroom x
// device memory (default 90%); when none fits, the reason says how much the cheapest one needs.
//
// Memory model (bytes per device; every buffer rounded as CachingAllocator::round_size does):
//   P, G: the flat parameter and gradient buffers as ParameterStore pads them (64-element
//   alignment; sharded: N equal aligned ranges). O: optimizer floats per parameter x the buffer
//   (ZeRO-1/2: x one range). A: activations, measured by profile_model (fixed + per example x
//   rows of one micro-batch on the device; with recompute, measured so too). DP: P + G + O + A.
//   ZeRO-1: O / N. ZeRO-2: G / N plus staging of the kZero2StagingBuckets largest buckets and of
//   tied parameters' buckets, at most G (docs/architecture.md, "Data parallel"); on one device as
//   ZeRO-1. ZeRO-3: as ZeRO-2 with P / N, plus the parameters gathered where the step peaks (the
//   turn from forward to backward): the last layer's, one parameter gathered ahead (the largest
//   counted), and tied parameters (held through backward); on one device as ZeRO-1.
//   Pipeline stage s: its own layers' P, G, O (tied parameters counted on every stage holding them)
//   plus the activations of the micro-batches it keeps in flight (1F1B: min(p - s, m); GPipe: m)
//   and the boundary tensors it sends (all m, kept until the optimizer) and receives (in flight),
//   each stage's share of the per-example activations taken from the per-layer profile (an
//   APPROXIMATION: per-block bytes from a depth probe for transformers, else by parameter share).
// Step time (ESTIMATES): compute = training FLOPs / GEMM rate; DP adds what its gradient
// all-reduce leaves exposed after backward: buckets in plan order become ready as backward
// (two thirds of the compute) makes their gradients, at an even rate, and the comm stream runs
// them one after another, each costing the collective latency plus 2(n-1)/n x its bytes at the
// link's bus bandwidth (bf16 reduction: half the bytes); data parallel and ZeRO-1 reduce during
// the last micro-batch's backward only, ZeRO-2 reduces to the owners ((n-1)/n x its bytes)
// during every micro-batch's; ZeRO-1 and ZeRO-2 add an all-gather of (n-1)/n x P after the
// optimizer; ZeRO-3 reduces as ZeRO-2 and adds, per micro-batch, what its forward's compute does
// not hide of gathering every parameter (a collective latency a piece plus P at the bus
// bandwidth; the next parameter's gather overlaps this one's work), and in backward what the
// gathers and the reductions, one after the other on the comm stream, need beyond the backward;
// recompute adds one forward
// of the recomputed layers
// (a third of their training FLOPs); a pipeline runs compute / p / (1 - the schedule's
// theoretical bubble: 1F1B and GPipe (p-1)/(m+p-1), ZB-H1 (p-1)/(3m+p-1)) plus the boundary
// transfers of (m + p - 1) micro-batch activations. ZB-H1's stages are counted with min(p, m)
// micro-batches in flight (those waiting for their weight gradient counted whole: an upper
// bound) plus post-validation's copy of P and O.
// Buckets (PlanRequest::choose_buckets; not on one device, which reduces nothing): each
// data-parallel strategy takes the bucket cap, of
// kBucketCapCandidates, with the shortest estimated step among those whose bytes fit (ZeRO-2's
// staging grows with the cap), the larger on a tie; when none fits, the one needing the least.
// Small buckets start communicating earlier; each costs a collective's latency.
// Errors: bad inputs (no devices, batch 0, ...) are ls::Error naming the field.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <lockstep/data/sampler.h>
#include <lockstep/data_parallel.h>
#include <lockstep/pipeline_schedule.h>

namespace ls {

// What the planner knows of a model.
struct ModelProfile {
  std::string description;
  std::vector<int64_t> parameter_numel;            // in registration order (ParameterStore's)
  std::vector<std::vector<int>> layer_parameters;  // per pipeline layer: indices of the above
  std::vector<std::string> layer_names;
  // Activations: fixed bytes per device plus per-example bytes (whole model), and each pipeline
  // layer's share of the per-example bytes (sums to 1).
  double activation_fixed_bytes = 0;
  double activation_bytes_per_example = 0;
  std::vector<double> layer_activation_share;
  std::string activation_source;              // how the activations were measured, for the output
  double optimizer_floats_per_parameter = 2;  // AdamW 2, SGD with momentum 1, without 0
  double train_flops_per_example = 0;
  double boundary_bytes_per_example = 0;  // activations passed between pipeline stages
  // Activations with Recompute::kBlocks, measured as the above (when recompute_measured; else
  // the planner does not propose recompute), and the FLOPs its second forward adds per example.
  bool recompute_measured = false;
  double recompute_fixed_bytes = 0;
  double recompute_bytes_per_example = 0;
  double recompute_flops_per_example = 0;
};

struct MachineSpec {
  int devices = 0;
  int64_t device_bytes = 0;
  double gemm_flops = 0;        // FLOP/s per device
  double link_bytes_per_s = 0;  // all-reduce bus bandwidth
  // Each collective's fixed cost (launch and synchronization): an ASSUMPTION, not measured;
  // NCCL's small all-reduces within a machine take tens of microseconds.
  double collective_latency_s = 50e-6;
};

// The bucket caps the planner chooses among (bytes of f32 gradients): 1, 2, 5, 10, 25 and 50 MiB.
inline constexpr int64_t kBucketCapCandidates[] = {1ll << 20,  2ll << 20,  5ll << 20,
                                                   10ll << 20, 25ll << 20, 50ll << 20};

struct PlanRequest {
  int64_t global_batch = 0;
  int micro_batches = 4;  // pipelines
  ScheduleKind schedule = ScheduleKind::k1F1B;
  BucketOptions buckets;  // as DataParallelOptions::buckets (ZeRO-2's staging)
  // Choose each data-parallel strategy's bucket cap (see above); false: buckets.cap_bytes.
  bool choose_buckets = true;
  int accumulate = 1;     // data parallel: micro-batches per step (pipelines cannot combine it)
  bool allow_uneven_shards = false;  // data parallel: the batch need not divide by the devices
  Precision precision = Precision::kF32;  // ZeRO-3 runs in f32 only
  double headroom = 0.9;  // a strategy fits when total <= headroom x device memory
};

struct StageBytes {
  int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0;
  int64_t total() const { return parameters + gradients + optimizer + activations; }
};

struct StrategyEstimate {
  std::string name;  // "data parallel", "ZeRO-1", "ZeRO-2 + recompute", "pipeline 2 x 2"
  ShardMode shard = ShardMode::kNone;
  Recompute recompute = Recompute::kNone;
  int stages = 1;                     // 1: no pipeline
  int pipelines = 1;                  // data-parallel width
  std::vector<StageBytes> per_stage;  // one entry without a pipeline
  StageBytes worst;                   // the stage with the largest total
  bool fits = false;                  // feasible, and worst.total() within the headroom
  std::string infeasible;  // why this strategy cannot run this batch at all ("" when it can)
  double step_ms = 0;
  int64_t bucket_cap_bytes = 0;  // data parallel: the bucket cap it is planned with; else 0
};

struct Plan {
  std::vector<StrategyEstimate> strategies;  // in the order of the rule
  int recommended = -1;                      // index into strategies; -1: nothing fits
  std::string reason;
};

// Predicts every strategy and applies the rule. An ls::Error for bad inputs.
Plan plan_strategies(const ModelProfile& model, const MachineSpec& machine,
                     const PlanRequest& request);

// The parameter elements ParameterStore lays out for `numel` (in order) cut into `shards`.
int64_t padded_elements(const std::vector<int64_t>& numel, int shards = 1);

struct ProbeOptions {
  std::function<data::Batch(int64_t rows)> batch;  // a batch of that many rows (required)
  OptimizerSpec optimizer;
  int64_t rows1 = 1, rows2 = 2;
  Device device{DeviceKind::kHost, 0};
  // Transformers: the same model with k layers, so activations are probed at 1 and 2 layers and
  // extrapolated linearly to `layers` (and per-block shares come out exact); empty: probe the
  // model as is and share activations among layers by parameter count.
  std::function<ModelFactory(int64_t layers)> with_layers;
  int64_t layers = 0;
  double train_flops_per_example = 0;
  double boundary_bytes_per_example = 0;
  // The share of train_flops_per_example in the layers recompute repeats (a transformer's
  // blocks, an MLP's layers): its second forward adds a third of that.
  double recomputed_flops_share = 1.0;
  bool probe_recompute = true;  // also measure the activations with Recompute::kBlocks
};

// Builds the model (declares parameters) for the layout and runs one DataParallel step at
// rows1 and rows2 rows on probe.device, measuring the allocator peak above the state bytes;
// again with Recompute::kBlocks when probe_recompute.
ModelProfile profile_model(const ModelFactory& model, const ProbeOptions& probe);

// Quick machine measurements (about a second together) for the planner's defaults: one square
// sgemm on `device` (FLOP/s), and all-reduces among `devices` (bus bandwidth, bytes/s: 2(n-1)/n
// x bytes / time; one device: the device's copy bandwidth).
double measure_gemm_flops(Device device, int64_t size = 512);
double measure_all_reduce_busbw(const std::vector<Device>& devices, int64_t bytes = 16ll << 20);

}  // namespace ls
