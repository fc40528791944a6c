// The planner (lockstep/planner.h): its memory predictions within 10% of the allocator peaks of
// real runs on host devices (a small GPT and an MLP; data parallel, ZeRO-1, ZeRO-2, ZeRO-3, each
// with and without recompute, and a 2-stage pipeline under 1F1B and ZB-H1, at a batch other than
// the probe's; ZeRO-2 at the bucket cap the planner chose), the recommendation rule and the bucket choice on synthetic
// profiles, and clear errors for bad inputs.
#include <lockstep/planner.h>

#include <gtest/gtest.h>

#include <random>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/transformer_config.h>
#include <lockstep/pipeline.h>
#include "parallel/random_batch.h"

namespace ls {
namespace {

std::vector<Device> hosts(int n) { return parse_devices("host:" + std::to_string(n)); }

constexpr int64_t kSeq = 16;
const OptimizerSpec kAdamW{"adamw", 1e-3f, 0.0f, 0.01f};

data::Batch token_batch(int64_t rows) {
  std::mt19937 rng(5);
  data::Batch b;
  b.size = rows;
  b.features = kSeq;
  b.label_width = kSeq;
  for (int64_t i = 0; i < rows * kSeq; ++i)
    b.tokens.push_back(1 + static_cast<int32_t>(rng() % 60));
  for (int64_t i = 0; i < rows * kSeq; ++i) b.labels.push_back(static_cast<int32_t>(rng() % 64));
  return b;
}

nn::TransformerConfig gpt(int64_t layers) {
  nn::TransformerConfig c = nn::gpt_config(layers, 4, 64, kSeq, 64);
  c.pad_id = 0;
  return c;
}

struct Case {
  std::string name;
  ModelFactory model;
  std::function<data::Batch(int64_t)> batch;
};

std::vector<Case> cases() {
  return {{"gpt", transformer_factory(gpt(2)), token_batch},
          {"mlp", mlp_factory({64, 256, 256, 10}),
           [](int64_t rows) { return testing::random_batch(rows, 64, 3); }}};
}

// The largest allocator peak of any device during one step of `run`.
int64_t measured_peak(const std::vector<Device>& devices, const std::function<void()>& run) {
  for (const Device& d : devices) device_runtime(d).allocator().reset_peak();
  run();
  int64_t peak = 0;
  for (const Device& d : devices) {
    peak = std::max(peak, device_runtime(d).allocator().stats().peak_bytes_in_use);
  }
  return peak;
}

MachineSpec machine(int devices, int64_t bytes) { return {devices, bytes, 1e11, 1e10}; }

TEST(Planner, PredictsDataParallelAndZeroPeaksWithinTenPercent) {
  for (const Case& c : cases()) {
    ProbeOptions probe;
    probe.batch = c.batch;
    probe.optimizer = kAdamW;
    const ModelProfile profile = profile_model(c.model, probe);
    PlanRequest request;
    request.global_batch = 8;              // 4 rows per device; the probe ran 1 and 2
    request.buckets = {4 << 10, 4 << 10};  // several buckets even for these small models
    request.choose_buckets = false;
    const Plan plan = plan_strategies(profile, machine(2, 1ll << 30), request);
    int checked = 0;
    for (const StrategyEstimate& e : plan.strategies) {
      if (e.stages != 1) continue;
      DataParallelOptions options;
      options.shard = e.shard;
      options.recompute = e.recompute;
      options.buckets = request.buckets;
      DataParallel dp(hosts(2), c.model, make_optimizer_factory(kAdamW), options);
      const int64_t peak = measured_peak(dp.devices(), [&] { dp.step(c.batch(8)); });
      EXPECT_NEAR(static_cast<double>(e.worst.total()), static_cast<double>(peak), 0.1 * peak)
          << c.name << " " << e.name;
      ++checked;
    }
    EXPECT_EQ(checked, 8) << c.name << ": data parallel, ZeRO-1, ZeRO-2 and ZeRO-3, with and "
                          << "without recompute";
  }
}

TEST(Planner, PredictsTwoStagePipelinePeaksWithinTenPercent) {
  for (const Case& c : cases()) {
    ProbeOptions probe;
    probe.batch = c.batch;
    probe.optimizer = kAdamW;
    if (c.name == "gpt") {  // the depth probe, so the blocks' and the head's shares are measured
      probe.with_layers = [](int64_t layers) { return transformer_factory(gpt(layers)); };
      probe.layers = 2;
      probe.boundary_bytes_per_example = 4.0 * kSeq * 64;
    }
    const ModelProfile profile = profile_model(c.model, probe);
    for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kZBH1}) {
      PlanRequest request;
      request.global_batch = 8;
      request.micro_batches = 4;
      request.schedule = schedule;
      const Plan plan = plan_strategies(profile, machine(2, 1ll << 30), request);
      ASSERT_EQ(plan.strategies.size(), 9u) << c.name;  // 4 data-parallel x 2, and the pipeline
      const StrategyEstimate& e = plan.strategies[8];
      ASSERT_EQ(e.stages, 2);
      PipelineOptions options;
      options.stages = 2;
      options.micro_batches = 4;
      options.schedule = schedule;
      Pipeline pipe(hosts(2), c.model, make_optimizer_factory(kAdamW), options);
      // The second step: ZB-H1's post-validation copy is made in the first step's optimizer,
      // after its activations are gone, and kept from then on.
      pipe.step(c.batch(8));
      for (int s = 0; s < 2; ++s) {
        const Device d = pipe.devices()[static_cast<size_t>(s)];
        device_runtime(d).allocator().reset_peak();
      }
      pipe.step(c.batch(8));
      for (int s = 0; s < 2; ++s) {
        const Device d = pipe.devices()[static_cast<size_t>(s)];
        const int64_t peak = device_runtime(d).allocator().stats().peak_bytes_in_use;
        const int64_t predicted = e.per_stage[static_cast<size_t>(s)].total();
        EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(peak), 0.1 * peak)
            << c.name << " stage " << s << ", " << schedule_name(schedule);
      }
    }
  }
}

TEST(Planner, DepthProbeExtrapolatesToADeeperGpt) {
  // Activations probed on 1- and 2-layer copies, predicted for 4 layers, against a real run.
  ProbeOptions probe;
  probe.batch = token_batch;
  probe.optimizer = kAdamW;
  probe.with_layers = [](int64_t layers) { return transformer_factory(gpt(layers)); };
  probe.layers = 4;
  const ModelFactory model = transformer_factory(gpt(4));
  const ModelProfile profile = profile_model(model, probe);
  EXPECT_NE(profile.activation_source.find("extrapolated to 4 layers"), std::string::npos);
  PlanRequest request;
  request.global_batch = 6;
  const Plan plan = plan_strategies(profile, machine(2, 1ll << 30), request);
  for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
    DataParallelOptions options;
    options.recompute = recompute;
    DataParallel dp(hosts(2), model, make_optimizer_factory(kAdamW), options);
    const int64_t peak = measured_peak(dp.devices(), [&] { dp.step(token_batch(6)); });
    // Data parallel, and data parallel + recompute (after the four without).
    const StrategyEstimate& e = plan.strategies[recompute == Recompute::kNone ? 0 : 4];
    ASSERT_EQ(e.recompute, recompute);
    EXPECT_NEAR(static_cast<double>(e.worst.total()), static_cast<double>(peak), 0.1 * peak)
        << e.name;
  }
}

// A synthetic model: 8 layers of 1M parameters, 10 MB of activations per example.
ModelProfile synthetic() {
  ModelProfile m;
  for (int l = 0; l < 8; ++l) {
    m.parameter_numel.push_back(1 << 20);
    m.layer_parameters.push_back({l});
    m.layer_names.push_back("h." + std::to_string(l));
    m.layer_activation_share.push_back(1.0 / 8);
  }
  m.activation_bytes_per_example = 10e6;
  m.train_flops_per_example = 6.0 * 8 * (1 << 20);
  return m;
}

TEST(Planner, RecommendsTheFirstStrategyThatFits) {
  PlanRequest request;
  request.global_batch = 4;   // 1 row per device on 4 devices
  request.micro_batches = 2;  // a 2 x 2 pipeline gets 2 rows per pipeline: at most 2
  request.buckets = {4 << 20, 4 << 20};
  request.choose_buckets = false;
  // 8M floats: 33.5 MB each of P and G, 67.1 MB of AdamW state, 10 MB of activations: 144 MB.
  Plan plan = plan_strategies(synthetic(), machine(4, 1ll << 30), request);
  EXPECT_EQ(plan.recommended, 0);
  EXPECT_NE(plan.reason.find("fits with data parallel: use it"), std::string::npos) << plan.reason;
  // 100 MB (90 usable): ZeRO-1 needs 33.5 + 33.5 + 16.8 + 10 = 93.9 MB; ZeRO-2 33.5 + 8.4 +
  // 16.8 + 10 + 12.6 of staging (3 buckets of 4 MiB) = 81.3 MB.
  plan = plan_strategies(synthetic(), machine(4, 100'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<size_t>(plan.recommended)].name, "ZeRO-2");
  EXPECT_NE(plan.reason.find("needs ZeRO-2"), std::string::npos) << plan.reason;
  // 88 MB (79.2 usable): ZeRO-3 needs 8.4 + 8.4 + 16.8 + 10 + 12.6 of staging + 8.4 gathered
  // (the largest layer's 4.2 MB and the one parameter gathered ahead) = 64.5 MB.
  plan = plan_strategies(synthetic(), machine(4, 88'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<size_t>(plan.recommended)].name, "ZeRO-3");
  EXPECT_NEAR(static_cast<double>(plan.strategies[3].worst.total()), 64.5e6, 0.1e6);
  EXPECT_NE(plan.reason.find("needs ZeRO-3"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("ZeRO-2 needs 81.3 MB"), std::string::npos) << plan.reason;
  // In bf16, which ZeRO-3 does not run: a 2-stage pipeline, whose first stage needs 4 layers'
  // 67.1 MB of state and 2 micro-batches in flight of half the activations (10 MB): 77.1 MB.
  request.precision = Precision::kBF16;
  plan = plan_strategies(synthetic(), machine(4, 88'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<size_t>(plan.recommended)].stages, 2);
  EXPECT_NE(plan.reason.find("needs a 2-stage pipeline"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.strategies[3].infeasible.find("f32 only"), std::string::npos);
  request.precision = Precision::kF32;
  // 10 MB: nothing fits, and the message says what would be needed.
  plan = plan_strategies(synthetic(), machine(4, 10'000'000), request);
  EXPECT_EQ(plan.recommended, -1);
  EXPECT_NE(plan.reason.find("nothing fits"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("use devices with at least"), std::string::npos) << plan.reason;
  // One device: ZeRO-1, -2 and -3 divide nothing, and ZeRO-2 and -3 stage and gather nothing
  // (they keep the flat buffers there), so all four predict the same bytes.
  plan = plan_strategies(synthetic(), machine(1, 1ll << 30), request);
  ASSERT_EQ(plan.strategies.size(), 4u);
  EXPECT_EQ(plan.strategies[2].worst.total(), plan.strategies[0].worst.total());
  EXPECT_EQ(plan.strategies[3].worst.total(), plan.strategies[0].worst.total());
}

TEST(Planner, RecomputesOnlyWhenShardingAloneDoesNotFit) {
  ModelProfile m = synthetic();
  m.recompute_measured = true;
  m.recompute_bytes_per_example = 2e6;  // each layer keeps its input only
  m.recompute_flops_per_example = m.train_flops_per_example / 3;
  m.recompute_fixed_bytes = 0;
  PlanRequest request;
  request.global_batch = 4;
  request.micro_batches = 2;
  request.buckets = {4 << 20, 4 << 20};
  request.choose_buckets = false;
  // 100 MB: ZeRO-2 fits without recompute (81.3 MB), so recompute is not used.
  Plan plan = plan_strategies(m, machine(4, 100'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<size_t>(plan.recommended)].name, "ZeRO-2");
  // 85 MB (76.5 usable): ZeRO-2 (81.3) does not fit, ZeRO-3 (64.5) does: sharding alone.
  plan = plan_strategies(m, machine(4, 85'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  EXPECT_EQ(plan.strategies[static_cast<size_t>(plan.recommended)].name, "ZeRO-3");
  // 68 MB (61.2 usable): ZeRO-3 (64.5) and ZeRO-2 + recompute (33.5 + 8.4 + 16.8 + 2 + 12.6 =
  // 73.3) do not fit; ZeRO-3 + recompute (8.4 + 8.4 + 16.8 + 2 + 12.6 + 8.4 = 56.5) does, before
  // the pipeline (77.1).
  plan = plan_strategies(m, machine(4, 68'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  const StrategyEstimate& chosen = plan.strategies[static_cast<size_t>(plan.recommended)];
  EXPECT_EQ(chosen.name, "ZeRO-3 + recompute");
  EXPECT_EQ(chosen.shard, ShardMode::kParameters);
  EXPECT_EQ(chosen.recompute, Recompute::kBlocks);
  EXPECT_NEAR(static_cast<double>(chosen.worst.total()), 56.5e6, 0.1e6);
  EXPECT_NE(plan.reason.find("needs ZeRO-3 + recompute"), std::string::npos) << plan.reason;
  EXPECT_NE(plan.reason.find("ZeRO-2 + recompute needs"), std::string::npos) << plan.reason;
  // Recompute costs a third more compute, which the estimate says (ZeRO-2's: ZeRO-3's gathers,
  // exposed on this slow link, are partly hidden by the longer backward).
  ASSERT_EQ(plan.strategies[6].name, "ZeRO-2 + recompute");
  EXPECT_GT(plan.strategies[6].step_ms, plan.strategies[2].step_ms);
}

// The bucket cap: the synthetic model's 8 gradients of 4.19 MB on 4 devices (all-reduce at
// 10 GB/s: 5.03 ms for all of them). Backward of 1 row at 6.7 GFLOP/s takes 5.0 ms, so buckets
// reduced during it cost little, and the step waits for what is left after it. Free
// collectives: the smallest buckets (one gradient each: the caps of 1, 2 and 5 MiB plan them
// alike, and the larger of equals is taken) leave 0.65 ms, against 1.27 ms at 10 MiB and 4.40 ms
// at 50 MiB. 10 ms a collective: the fewest buckets, 50 MiB.
TEST(Planner, ChoosesTheBucketCapThatLeavesTheLeastCommunicationExposed) {
  PlanRequest request;
  request.global_batch = 4;
  MachineSpec spec{4, 1ll << 30, 6.7e9, 1e10};
  spec.collective_latency_s = 0;
  Plan plan = plan_strategies(synthetic(), spec, request);
  const StrategyEstimate& free_collectives = plan.strategies[0];
  ASSERT_EQ(free_collectives.name, "data parallel");
  EXPECT_EQ(free_collectives.bucket_cap_bytes, 5ll << 20);
  request.choose_buckets = false;
  request.buckets.cap_bytes = 50ll << 20;
  const double with_big_buckets = plan_strategies(synthetic(), spec, request).strategies[0].step_ms;
  EXPECT_LT(free_collectives.step_ms, with_big_buckets);
  EXPECT_EQ(plan_strategies(synthetic(), spec, request).strategies[0].bucket_cap_bytes, 50ll << 20);
  request.choose_buckets = true;
  spec.collective_latency_s = 10e-3;
  plan = plan_strategies(synthetic(), spec, request);
  EXPECT_EQ(plan.strategies[0].bucket_cap_bytes, 50ll << 20);
  for (const StrategyEstimate& e : plan.strategies) {
    if (e.stages > 1) {
      EXPECT_EQ(e.bucket_cap_bytes, 0) << e.name;
    }
  }
}

// ZeRO-2's staging grows with the cap: at 100 MB a device (90 usable) it needs 102 MB with
// 25 MiB buckets but 81.3 MB with one gradient a bucket, so the planner picks small buckets and
// ZeRO-2 fits (ZeRO-1 needs 93.9 MB).
TEST(Planner, ChoosesBucketsSmallEnoughForZeroTwoToFit) {
  PlanRequest request;
  request.global_batch = 4;
  request.micro_batches = 2;
  request.choose_buckets = false;
  request.buckets.cap_bytes = 25ll << 20;
  Plan plan = plan_strategies(synthetic(), machine(4, 100'000'000), request);
  EXPECT_FALSE(plan.strategies[2].fits) << plan.strategies[2].worst.total();
  request.choose_buckets = true;
  plan = plan_strategies(synthetic(), machine(4, 100'000'000), request);
  ASSERT_GE(plan.recommended, 0) << plan.reason;
  const StrategyEstimate& chosen = plan.strategies[static_cast<size_t>(plan.recommended)];
  EXPECT_EQ(chosen.name, "ZeRO-2");
  EXPECT_LE(chosen.bucket_cap_bytes, 5ll << 20);
  EXPECT_NEAR(static_cast<double>(chosen.worst.total()), 81.3e6, 0.1e6);
}

// The chosen cap's ZeRO-2 prediction against a real run with that cap. An MLP with four 4 MiB
// weights: with caps up to 5 MiB they go to buckets of their own (ZeRO-2 stages the three
// largest of them), with 25 MiB into one (ZeRO-2 stages it all). With device memory between
// the two predictions, the planner must take a small cap, and its bytes must be the run's.
TEST(Planner, PredictsZeroTwoWithTheChosenBucketsWithinTenPercent) {
  const ModelFactory model = mlp_factory({64, 1024, 1024, 1024, 1024, 1024, 10});
  auto batch = [](int64_t rows) { return testing::random_batch(rows, 64, 3); };
  ProbeOptions probe;
  probe.batch = batch;
  probe.optimizer = kAdamW;
  probe.probe_recompute = false;
  const ModelProfile profile = profile_model(model, probe);
  PlanRequest request;
  request.global_batch = 8;
  request.choose_buckets = false;
  request.buckets.cap_bytes = 5ll << 20;
  const int64_t small =
      plan_strategies(profile, machine(2, 1ll << 30), request).strategies[2].worst.total();
  request.buckets.cap_bytes = 25ll << 20;
  const int64_t large =
      plan_strategies(profile, machine(2, 1ll << 30), request).strategies[2].worst.total();
  ASSERT_LT(small, large) << "ZeRO-2 stages less with small buckets";
  request.choose_buckets = true;
  const auto device_bytes = static_cast<int64_t>(static_cast<double>(small + large) / 2 / 0.9);
  const Plan plan = plan_strategies(profile, machine(2, device_bytes), request);
  const StrategyEstimate& e = plan.strategies[2];
  ASSERT_EQ(e.name, "ZeRO-2");
  EXPECT_TRUE(e.fits);
  EXPECT_LE(e.bucket_cap_bytes, 5ll << 20);
  DataParallelOptions options;
  options.shard = ShardMode::kGradients;
  options.buckets.cap_bytes = e.bucket_cap_bytes;
  DataParallel dp(hosts(2), model, make_optimizer_factory(kAdamW), options);
  const int64_t peak = measured_peak(dp.devices(), [&] { dp.step(batch(8)); });
  EXPECT_NEAR(static_cast<double>(e.worst.total()), static_cast<double>(peak), 0.1 * peak)
      << "bucket cap " << e.bucket_cap_bytes;
}

std::string error_of(const ModelProfile& m, const MachineSpec& machine, PlanRequest r) {
  try {
    plan_strategies(m, machine, r);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Planner, BadInputsAreClearErrors) {
  PlanRequest r;
  r.global_batch = 8;
  EXPECT_NE(error_of(synthetic(), machine(0, 1 << 30), r).find("devices is 0"), std::string::npos);
  EXPECT_NE(error_of(synthetic(), machine(2, 0), r).find("device memory is 0"), std::string::npos);
  r.global_batch = 0;
  EXPECT_NE(error_of(synthetic(), machine(2, 1 << 30), r).find("batch is 0"), std::string::npos);
  r.global_batch = 8;
  r.micro_batches = 0;
  EXPECT_NE(error_of(synthetic(), machine(2, 1 << 30), r).find("micro-batches is 0"),
            std::string::npos);
  PlanRequest one;
  one.global_batch = 1;
  EXPECT_NE(error_of(ModelProfile{}, machine(2, 1 << 30), one).find("no parameters"),
            std::string::npos);
}

TEST(Planner, PaddingFollowsParameterStore) {
  EXPECT_EQ(padded_elements({1, 64, 65}), 64 + 64 + 128);
  EXPECT_EQ(padded_elements({1, 64, 65}, 2), 2 * 128);  // 256 -> two ranges of 128
  EXPECT_EQ(padded_elements({100}, 3), 3 * 64);
}

}  // namespace
}  // namespace ls
