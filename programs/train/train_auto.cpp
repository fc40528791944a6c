// lockstep-train --strategy auto (see programs/train/train_auto.h).
#include "programs/train/train_auto.h"

#include <cstdio>
#include <numeric>

#include "programs/common/plan_support.h"

void apply_auto_strategy(TrainOptions& o, const WorkloadOptions& workload,
                         const std::vector<ls::Device>& devices) {
  const Workload work = make_workload(workload);
  PlanModel model;
  model.model = work.model;
  model.transformer = work.transformer;
  model.mlp_widths = work.mlp_widths;
  model.description = work.description;
  const ls::data::Dataset& train = work.train;
  model.batch = [&train](int64_t rows) {  // the first training examples
    LS_CHECK(rows <= train.count, "the planner's probe needs ", rows, " training examples");
    std::vector<int64_t> indices(static_cast<size_t>(rows));
    std::iota(indices.begin(), indices.end(), 0);
    ls::data::Batch batch;
    ls::data::gather_batch(train, indices, batch);
    return batch;
  };
  const ls::ModelProfile profile =
      plan_profile(model, {o.optimizer, o.lr, o.momentum, o.weight_decay});
  const ls::MachineSpec spec = plan_machine({o.device_memory_gb, 0, 0}, devices);
  ls::PlanRequest request;
  request.global_batch = o.batch;
  request.micro_batches = static_cast<int>(o.micro_batches);
  request.schedule = ls::parse_schedule(o.schedule);
  request.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
  request.choose_buckets = o.choose_buckets;
  request.buckets.reduce_dtype = o.grad_reduce;
  request.precision = o.precision;
  request.accumulate = static_cast<int>(o.accumulate);
  request.allow_uneven_shards = o.uneven_shards;
  const ls::Plan plan = ls::plan_strategies(profile, spec, request);
  print_plan(profile, spec, request, plan);
  LS_CHECK(plan.recommended >= 0, "--strategy auto: ", plan.reason);
  const ls::StrategyEstimate& chosen = plan.strategies[static_cast<size_t>(plan.recommended)];
  o.shard = chosen.shard;
  o.recompute = chosen.recompute;
  o.pipeline = chosen.stages > 1 ? chosen.stages : 0;
  if (chosen.stages == 1) o.bucket_mb = static_cast<double>(chosen.bucket_cap_bytes) / (1 << 20);
  std::printf("--strategy auto: training with %s", chosen.name.c_str());
  if (chosen.stages == 1) std::printf(", %g MiB gradient buckets", o.bucket_mb);
  std::printf("\n");
  std::fflush(stdout);
}
