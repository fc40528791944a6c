// The planner's memory and time model (see lockstep/planner.h).
#include <lockstep/planner.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <optional>

#include <lockstep/allocator.h>
#include <lockstep/error.h>
#include <lockstep/nn/module.h>
#include "parallel/data_parallel/bucket_plan.h"

namespace ls {
namespace {

constexpr int64_t kAlign = 64;  // nn::ParameterStore::kAlignment

std::string megabytes(double bytes) {  // "12.3 MB"
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", bytes / 1e6);
  return text;
}

int64_t rounded(int64_t bytes) {
  return static_cast<int64_t>(CachingAllocator::round_size(static_cast<size_t>(bytes)));
}

// P, G and O of one flat store over `numel`, sharded `shards` ways (ZeRO modes divide O or G).
StageBytes state_of(const ModelProfile& m, const std::vector<int64_t>& numel, int shards,
                    ShardMode mode) {
  const int64_t flat = padded_elements(numel, shards);
  const int64_t range = flat / shards;
  StageBytes b;
  const bool sharded_gradients = mode == ShardMode::kGradients || mode == ShardMode::kParameters;
  b.parameters = rounded((mode == ShardMode::kParameters ? range : flat) * 4);
  const int64_t opt_elems = mode == ShardMode::kNone ? flat : range;
  const int tensors = static_cast<int>(std::lround(m.optimizer_floats_per_parameter));
  b.optimizer = tensors * rounded(opt_elems * 4);
  b.gradients = sharded_gradients ? rounded(range * 4) : rounded(flat * 4);
  return b;
}

// ZeRO-3's gathered parameters where a step peaks, at the turn from forward to backward (Note
// [Sharded parameters]): the last layer's (backward gathers them again at once), the one
// parameter gathered ahead of backward's first, and the tied parameters (backward holds them
// from their first use to their last) that the last layer does not hold.
int64_t gathered_bytes(const ModelProfile& m) {
  std::vector<int> uses(m.parameter_numel.size(), 0);
  for (const auto& layer : m.layer_parameters) {
    for (int i : layer) ++uses[static_cast<size_t>(i)];
  }
  const auto bytes_of = [&](int i) {
    return rounded(m.parameter_numel[static_cast<size_t>(i)] * 4);
  };
  std::vector<int> last;
  for (const auto& layer : m.layer_parameters) {
    if (!layer.empty()) last = layer;
  }
  int64_t gathered = 0, largest_parameter = 0;
  for (int i : last) gathered += bytes_of(i);
  for (size_t i = 0; i < uses.size(); ++i) {
    const int index = static_cast<int>(i);
    largest_parameter = std::max(largest_parameter, bytes_of(index));
    const bool in_last = std::find(last.begin(), last.end(), index) != last.end();
    if (uses[i] > 1 && !in_last) gathered += bytes_of(index);
  }
  return gathered + largest_parameter;
}

// ZeRO-3's gathers of one pass, in ms: every parameter broadcast from its owner, one collective
// a piece (a parameter cut by a range boundary has two; the N - 1 boundaries add at most N - 1).
double gather_pass_ms(const ModelProfile& m, const MachineSpec& machine) {
  double bytes = 0;
  for (int64_t n : m.parameter_numel) bytes += 4.0 * static_cast<double>(n);
  const double pieces = static_cast<double>(m.parameter_numel.size() + machine.devices - 1);
  return (pieces * machine.collective_latency_s + bytes / machine.link_bytes_per_s) * 1e3;
}

void check_inputs(const ModelProfile& m, const MachineSpec& machine, const PlanRequest& r) {
  LS_CHECK(machine.devices >= 1, "planner: devices is ", machine.devices, "; need at least 1");
  LS_CHECK(machine.device_bytes > 0, "planner: device memory is ", machine.device_bytes,
           " bytes; it must be positive");
  LS_CHECK(machine.gemm_flops > 0 && machine.link_bytes_per_s > 0,
           "planner: the GEMM rate and link bandwidth must be positive");
  LS_CHECK(machine.collective_latency_s >= 0, "planner: the collective latency is ",
           machine.collective_latency_s, " s; it cannot be negative");
  LS_CHECK(r.global_batch >= 1, "planner: batch is ", r.global_batch, "; need at least 1");
  LS_CHECK(r.micro_batches >= 1, "planner: micro-batches is ", r.micro_batches,
           "; need at least 1");
  LS_CHECK(r.headroom > 0 && r.headroom <= 1, "planner: headroom must be in (0, 1]");
  LS_CHECK(!m.parameter_numel.empty(), "planner: the model has no parameters");
  LS_CHECK(m.layer_parameters.size() == m.layer_activation_share.size(),
           "planner: the profile has ", m.layer_parameters.size(), " layers but ",
           m.layer_activation_share.size(), " activation shares");
}

// The model's gradient buckets as the Reducer plans them (a parameter larger than the cap alone
// in one), in the order they are reduced.
std::vector<Bucket> planned_buckets(const ModelProfile& m, const BucketOptions& options) {
  std::vector<ParameterExtent> extents;
  int64_t offset = 0;
  for (int64_t n : m.parameter_numel) {
    const int64_t extent = (n + kAlign - 1) / kAlign * kAlign;
    extents.push_back({offset, extent});
    offset += extent;
  }
  return plan_buckets(extents, 4, options);
}

// ZeRO-2's staging: the kZero2StagingBuckets largest buckets at once, plus the buckets of tied
// parameters (used by two layers: touched at the start of backward, reduced at its end).
int64_t staging_bytes(const ModelProfile& m, const BucketOptions& options) {
  std::vector<int> uses(m.parameter_numel.size(), 0);
  for (const auto& layer : m.layer_parameters) {
    for (int i : layer) ++uses[static_cast<size_t>(i)];
  }
  std::vector<int64_t> sizes;
  int64_t tied = 0;
  for (const Bucket& b : planned_buckets(m, options)) {
    const bool holds_tied = std::any_of(b.parameters.begin(), b.parameters.end(),
                                        [&](int i) { return uses[static_cast<size_t>(i)] > 1; });
    if (holds_tied) {
      tied += rounded(b.count * 4);
    } else {
      sizes.push_back(rounded(b.count * 4));
    }
  }
  std::sort(sizes.rbegin(), sizes.rend());
  int64_t sum = tied;
  for (size_t i = 0; i < sizes.size() && i < kZero2StagingBuckets; ++i) sum += sizes[i];
  return sum;
}

double all_reduce_ms(double bytes, int n, double busbw) {
  return n <= 1 ? 0.0 : 2.0 * (n - 1) / n * bytes / busbw * 1e3;
}

// The gradient reduction left after a backward ends, in ms (lockstep/planner.h, Step time):
// bucket b is ready once backward (backward_ms long, making gradient bytes at an even rate in
// the buckets' plan order) has made it and every bucket before it; the comm stream runs them in
// order, each for the collective latency plus its bytes (bf16: half) x `volume` (a ring
// all-reduce 2(n-1)/n, ZeRO-2's reduce to the owners (n-1)/n) at the bus bandwidth.
double exposed_reduce_ms(const ModelProfile& m, const MachineSpec& machine,
                         const BucketOptions& options, double volume, double backward_ms) {
  const int n = machine.devices;
  if (n <= 1) return 0.0;
  const std::vector<Bucket> buckets = planned_buckets(m, options);
  double total = 0;
  for (const Bucket& b : buckets) total += static_cast<double>(b.count);
  const double element_bytes = options.reduce_dtype == DType::kBF16 ? 2.0 : 4.0;
  double made = 0, comm_free_ms = 0;
  for (const Bucket& b : buckets) {
    made += static_cast<double>(b.count);
    const double ready_ms = backward_ms * made / total;
    comm_free_ms = std::max(comm_free_ms, ready_ms) + machine.collective_latency_s * 1e3 +
                   volume * element_bytes * static_cast<double>(b.count) /
                       machine.link_bytes_per_s * 1e3;
  }
  return std::max(0.0, comm_free_ms - backward_ms);
}

StrategyEstimate data_parallel(const ModelProfile& m, const MachineSpec& machine,
                               const PlanRequest& r, ShardMode mode, Recompute recompute,
                               const BucketOptions& buckets) {
  const int n = machine.devices;
  const bool again = recompute == Recompute::kBlocks;
  StrategyEstimate e;
  e.name = mode == ShardMode::kNone        ? "data parallel"
           : mode == ShardMode::kOptimizer ? "ZeRO-1"
           : mode == ShardMode::kGradients ? "ZeRO-2"
                                           : "ZeRO-3";
  if (again) e.name += " + recompute";
  e.shard = mode;
  e.recompute = recompute;
  e.pipelines = n;
  e.bucket_cap_bytes = buckets.cap_bytes;
  const int shards = mode == ShardMode::kNone ? 1 : n;
  // On one device ZeRO-2 and ZeRO-3 keep the flat buffers (parallel/data_parallel/replica.cpp):
  // no staging, nothing gathered.
  const bool sharded_gradients = mode == ShardMode::kGradients || mode == ShardMode::kParameters;
  const ShardMode layout = sharded_gradients && n == 1 ? ShardMode::kOptimizer : mode;
  const bool zero2 = layout == ShardMode::kGradients || layout == ShardMode::kParameters;
  const bool zero3 = layout == ShardMode::kParameters;
  StageBytes b = state_of(m, m.parameter_numel, shards, layout);
  // bf16 reduction keeps a bf16 copy of the gradients to reduce (BucketOptions::reduce_dtype).
  if (buckets.reduce_dtype == DType::kBF16 && n > 1 && !zero2) {
    b.gradients += rounded(padded_elements(m.parameter_numel, shards) * 2);
  }
  const double rows = std::ceil(static_cast<double>(r.global_batch) / n);
  if (r.global_batch % n != 0 && !r.allow_uneven_shards) {
    e.infeasible = "the batch of " + std::to_string(r.global_batch) + " does not divide by " +
                   std::to_string(n) + " devices";
  } else if (rows < r.accumulate) {
    e.infeasible = "fewer rows per device than micro-batches (--accumulate)";
  }
  // Accumulation runs the device's rows in `accumulate` micro-batches: activations of one.
  const double micro = std::ceil(rows / r.accumulate);
  double act = again ? m.recompute_fixed_bytes + m.recompute_bytes_per_example * micro
                     : m.activation_fixed_bytes + m.activation_bytes_per_example * micro;
  if (zero2) {
    act += static_cast<double>(
        std::min(rounded(padded_elements(m.parameter_numel, 1) * 4), staging_bytes(m, buckets)));
  }
  if (zero3) act += static_cast<double>(gathered_bytes(m));
  b.activations = static_cast<int64_t>(act);
  e.per_stage = {b};
  e.worst = b;
  const double grad_bytes = 4.0 * static_cast<double>(padded_elements(m.parameter_numel, shards));
  const double flops =
      m.train_flops_per_example + (again ? m.recompute_flops_per_example : 0.0);
  const double compute_ms = flops * rows / machine.gemm_flops * 1e3;
  // Backward: two thirds of a micro-batch's training FLOPs (and all of recompute's second
  // forward). Data parallel and ZeRO-1 reduce during the step's last micro-batch only; ZeRO-2
  // reduces to the owners during every one.
  const double backward_ms =
      (m.train_flops_per_example * 2.0 / 3.0 + (again ? m.recompute_flops_per_example : 0.0)) *
      micro / machine.gemm_flops * 1e3;
  const double volume = n <= 1 ? 0.0 : (zero2 ? 1.0 : 2.0) * (n - 1.0) / n;
  // ZeRO-3 gathers every parameter for each micro-batch's forward and again for its backward, on
  // the comm stream: the forward's compute hides what it can of the first, and the backward's
  // gathers take their time out of the window the backward leaves the reductions (one stream,
  // one link: what both need beyond the backward is exposed).
  double reduce_window_ms = backward_ms, gathers_exposed_ms = 0;
  if (zero3) {
    const double gather_ms = gather_pass_ms(m, machine);
    const double forward_ms = m.train_flops_per_example / 3.0 * micro / machine.gemm_flops * 1e3;
    gathers_exposed_ms =
        std::max(0.0, gather_ms - forward_ms) + std::max(0.0, gather_ms - backward_ms);
    reduce_window_ms = std::max(0.0, backward_ms - gather_ms);
  }
  e.step_ms = compute_ms +
              (zero2 ? r.accumulate : 1) *
                  exposed_reduce_ms(m, machine, buckets, volume, reduce_window_ms) +
              r.accumulate * gathers_exposed_ms;
  // ZeRO-1 and ZeRO-2: every replica all-gathers the updated ranges after the optimizer.
  if (mode != ShardMode::kNone && !zero3 && n > 1) {
    e.step_ms += (n - 1.0) / n * grad_bytes / machine.link_bytes_per_s * 1e3;
  }
  if (zero2 && buckets.reduce_dtype == DType::kBF16 && e.infeasible.empty()) {
    e.infeasible = e.name + " reduces gradients in f32 only (drop --grad-reduce bf16)";
  }
  if (zero3 && r.precision != Precision::kF32 && e.infeasible.empty()) {
    e.infeasible = "ZeRO-3 trains in f32 only (drop --precision)";
  }
  return e;
}

// data_parallel with the request's bucket cap, or (choose_buckets) the candidate with the
// shortest step among those that fit, the larger on a tie; when none fits, the smallest.
StrategyEstimate data_parallel(const ModelProfile& m, const MachineSpec& machine,
                               const PlanRequest& r, ShardMode mode, Recompute recompute) {
  // One device reduces nothing: every cap is the same, and none is chosen.
  if (!r.choose_buckets || machine.devices == 1) {
    return data_parallel(m, machine, r, mode, recompute, r.buckets);
  }
  const double usable = r.headroom * static_cast<double>(machine.device_bytes);
  std::optional<StrategyEstimate> best;
  for (auto cap = std::rbegin(kBucketCapCandidates); cap != std::rend(kBucketCapCandidates);
       ++cap) {
    BucketOptions buckets = r.buckets;
    buckets.cap_bytes = *cap;
    buckets.first_bucket_bytes = std::min(buckets.first_bucket_bytes, *cap);
    StrategyEstimate e = data_parallel(m, machine, r, mode, recompute, buckets);
    if (!best) {
      best = std::move(e);
      continue;
    }
    const bool fits = static_cast<double>(e.worst.total()) <= usable;
    const bool best_fits = static_cast<double>(best->worst.total()) <= usable;
    const bool better = fits != best_fits ? fits
                        : fits            ? e.step_ms < best->step_ms
                                          : e.worst.total() < best->worst.total();
    if (better) best = std::move(e);
  }
  return *best;
}

int layers_with_parameters(const ModelProfile& m) {
  int count = 0;
  for (const auto& l : m.layer_parameters) count += l.empty() ? 0 : 1;
  return count;
}

StrategyEstimate pipeline(const ModelProfile& m, const MachineSpec& machine, const PlanRequest& r,
                          int p) {
  StrategyEstimate e;
  e.stages = p;
  e.pipelines = machine.devices / p;
  e.name = "pipeline " + std::to_string(p) + " x " + std::to_string(e.pipelines);
  std::vector<bool> has;
  for (const auto& l : m.layer_parameters) has.push_back(!l.empty());
  const auto ranges = split_layers(has, p);
  const int mb = r.micro_batches;
  const double micro_rows =
      std::ceil(std::ceil(static_cast<double>(r.global_batch) / e.pipelines) / mb);
  if (r.accumulate > 1) {
    e.infeasible = "a pipeline accumulates over its micro-batches, not with --accumulate";
  } else if (r.global_batch % e.pipelines != 0) {
    e.infeasible = "the batch of " + std::to_string(r.global_batch) + " does not divide by " +
                   std::to_string(e.pipelines) + " pipelines";
  } else if (r.global_batch / e.pipelines < mb) {
    e.infeasible = "each pipeline's " + std::to_string(r.global_batch / e.pipelines) +
                   " rows are fewer than the " + std::to_string(mb) + " micro-batches";
  }
  double max_grad_bytes = 0;
  for (int s = 0; s < p; ++s) {
    std::vector<bool> used(m.parameter_numel.size(), false);
    double share = 0;
    for (int l = ranges[static_cast<size_t>(s)].first; l < ranges[static_cast<size_t>(s)].second;
         ++l) {
      for (int i : m.layer_parameters[static_cast<size_t>(l)]) used[static_cast<size_t>(i)] = true;
      share += m.layer_activation_share[static_cast<size_t>(l)];
    }
    std::vector<int64_t> numel;  // in registration order, as PipelineStage builds its store
    for (size_t i = 0; i < used.size(); ++i) {
      if (used[i]) numel.push_back(m.parameter_numel[i]);
    }
    StageBytes b = state_of(m, numel, 1, ShardMode::kNone);
    // Micro-batches whose activations the stage holds at once: ZB-H1's stage s holds p - s
    // whole and up to s whose weight gradient waits (counted whole here: an upper bound).
    const int in_flight = r.schedule == ScheduleKind::kGPipe   ? mb
                          : r.schedule == ScheduleKind::kZBH1 ? std::min(p, mb)
                                                               : std::min(p - s, mb);
    // Boundary tensors: a stage keeps every activation and gradient it sends until the step's
    // optimizer (Note [Pipeline transfer lifetime]), m of each, and its received copies live
    // with the micro-batches in flight.
    const int sends = (s + 1 < p ? 1 : 0) + (s > 0 ? 1 : 0);
    const int receives = sends;
    b.activations = static_cast<int64_t>(
        m.activation_fixed_bytes / p +
        m.activation_bytes_per_example * share * micro_rows * in_flight +
        m.boundary_bytes_per_example * micro_rows * (sends * mb + receives * in_flight));
    // ZB-H1's post-validation keeps a copy of the parameters and optimizer state.
    if (splits_backward(r.schedule)) b.optimizer += b.parameters + b.optimizer;
    e.per_stage.push_back(b);
    if (b.total() > e.worst.total()) e.worst = b;
    max_grad_bytes = std::max(max_grad_bytes, static_cast<double>(b.gradients));
  }
  const double compute_ms = m.train_flops_per_example * micro_rows * mb / machine.gemm_flops * 1e3;
  const double transfers_ms = 2.0 * (mb + p - 1) * m.boundary_bytes_per_example * micro_rows /
                              machine.link_bytes_per_s * 1e3;
  e.step_ms = compute_ms / p / (1.0 - theoretical_bubble(p, mb, r.schedule)) + transfers_ms +
              all_reduce_ms(max_grad_bytes, e.pipelines, machine.link_bytes_per_s);
  return e;
}

std::string recommend(const Plan& plan, const MachineSpec& machine, const PlanRequest& r) {
  const double usable = r.headroom * static_cast<double>(machine.device_bytes);
  if (plan.recommended < 0) {
    const StrategyEstimate* best = nullptr;
    for (const StrategyEstimate& e : plan.strategies) {
      if (e.infeasible.empty() && (best == nullptr || e.worst.total() < best->worst.total())) {
        best = &e;
      }
    }
    if (best == nullptr) {
      return "no strategy can run a batch of " + std::to_string(r.global_batch) + " on " +
             std::to_string(machine.devices) + " devices: " + plan.strategies.front().name + ": " +
             plan.strategies.front().infeasible;
    }
    return "nothing fits in " + megabytes(usable) + " per device (" +
           std::to_string(static_cast<int>(r.headroom * 100)) + "% of " +
           megabytes(static_cast<double>(machine.device_bytes)) + "): the smallest, " + best->name +
           ", needs " + megabytes(static_cast<double>(best->worst.total())) +
           " per device; use devices with at least " +
           megabytes(static_cast<double>(best->worst.total()) / r.headroom) +
           ", more devices, or a smaller batch";
  }
  const StrategyEstimate& e = plan.strategies[static_cast<size_t>(plan.recommended)];
  const std::string need =
      megabytes(static_cast<double>(e.worst.total())) + " of " + megabytes(usable) + " per device";
  if (e.stages == 1 && e.shard == ShardMode::kNone && e.recompute == Recompute::kNone) {
    return "fits with data parallel: use it (" + need + ")";
  }
  const StrategyEstimate& before = plan.strategies[static_cast<size_t>(plan.recommended) - 1];
  const std::string why =
      "; " + before.name +
      (before.infeasible.empty() ? " needs " + megabytes(static_cast<double>(before.worst.total()))
                                 : " cannot run it: " + before.infeasible);
  if (e.stages == 1) return "needs " + e.name + ": " + need + why;
  return "needs a " + std::to_string(e.stages) + "-stage pipeline (x " +
         std::to_string(e.pipelines) + " data parallel): " + need + why;
}

}  // namespace

int64_t padded_elements(const std::vector<int64_t>& numel, int shards) {
  LS_CHECK(shards >= 1, "padded_elements: shards is ", shards);
  int64_t offset = 0;
  for (int64_t n : numel) offset += (n + kAlign - 1) / kAlign * kAlign;
  const int64_t shard = (offset + shards - 1) / shards;
  return (shard + kAlign - 1) / kAlign * kAlign * shards;
}

Plan plan_strategies(const ModelProfile& m, const MachineSpec& machine, const PlanRequest& r) {
  check_inputs(m, machine, r);
  Plan plan;
  std::vector<Recompute> recompute = {Recompute::kNone};
  if (m.recompute_measured) recompute.push_back(Recompute::kBlocks);
  for (Recompute again : recompute) {
    for (ShardMode mode : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients,
                           ShardMode::kParameters}) {
      plan.strategies.push_back(data_parallel(m, machine, r, mode, again));
    }
  }
  const int layers = layers_with_parameters(m);
  for (int p = 2; p <= machine.devices && p <= layers; p *= 2) {
    if (machine.devices % p == 0) plan.strategies.push_back(pipeline(m, machine, r, p));
  }
  const double usable = r.headroom * static_cast<double>(machine.device_bytes);
  for (size_t i = 0; i < plan.strategies.size(); ++i) {
    StrategyEstimate& e = plan.strategies[i];
    e.fits = e.infeasible.empty() && static_cast<double>(e.worst.total()) <= usable;
    if (e.fits && plan.recommended < 0) plan.recommended = static_cast<int>(i);
  }
  plan.reason = recommend(plan, machine, r);
  return plan;
}

}  // namespace ls
