// Training through DataParallel on host devices with the gradient reduction's options
// (BucketOptions): fused bucket launches give bitwise the parameters of one launch per bucket
// (MLP, tiny GPT, ZeRO-2) with fewer launches; gradients all-reduced in bf16 track the f32
// reduction and keep every replica bitwise equal; bf16 with sharded gradients is refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/data_parallel.h>
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::random_batch;

const OptimizerSpec kSgd{"sgd", 0.05f, 0.9f, 1e-4f};

DataParallelOptions small_buckets(bool fuse, DType dtype = DType::kF32,
                                  ShardMode shard = ShardMode::kNone) {
  DataParallelOptions o;
  o.buckets.cap_bytes = o.buckets.first_bucket_bytes = 256;  // about one parameter per bucket
  o.buckets.fuse_ready = fuse;
  o.buckets.reduce_dtype = dtype;
  o.shard = shard;
  return o;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> parameters;
  BucketTimeline timeline;  // replica 0's, last step
  size_t buckets = 0;
};

TrainRun train(const ModelFactory& model, const DataParallelOptions& options, int steps,
               const std::function<data::Batch(int)>& batch) {
  DataParallel dp(hosts(2), model, make_optimizer_factory(kSgd), options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(dp.step(batch(s)).loss);
  run.parameters = dp.parameters(0);
  EXPECT_EQ(dp.parameters(1), run.parameters) << "replicas disagree";
  run.timeline = dp.last_timeline(0);
  run.buckets = dp.buckets().size();
  return run;
}

data::Batch mlp_batch(int s) { return random_batch(32, 20, static_cast<uint32_t>(100 + s)); }

void expect_fusion_changes_only_the_launches(const TrainRun& fused, const TrainRun& alone) {
  EXPECT_EQ(fused.parameters, alone.parameters);  // same collectives in the same order: bitwise
  EXPECT_EQ(fused.losses, alone.losses);
  ASSERT_EQ(fused.buckets, alone.buckets);
  EXPECT_GT(fused.buckets, 4u);
  EXPECT_EQ(fused.timeline.collectives, alone.timeline.collectives);
  EXPECT_LT(fused.timeline.launches, alone.timeline.launches);
  EXPECT_EQ(fused.timeline.bucket_launch.size(), fused.buckets);
  EXPECT_EQ(fused.timeline.bucket_launch.back() + 1, fused.timeline.launches);
}

TEST(FusedBucketLaunches, MlpIsBitwiseTheUnfusedRunWithFewerLaunches) {
  const ModelFactory mlp = mlp_factory({20, 32, 16, 10});
  const TrainRun fused = train(mlp, small_buckets(true), 10, mlp_batch);
  const TrainRun alone = train(mlp, small_buckets(false), 10, mlp_batch);
  expect_fusion_changes_only_the_launches(fused, alone);
  // Unfused, every bucket is one all-reduce launched alone.
  EXPECT_EQ(alone.timeline.launches, static_cast<int>(alone.buckets));
  EXPECT_EQ(alone.timeline.collectives, static_cast<int>(alone.buckets));
  // Each linear layer's weight bucket is ready before its bias's (earlier in plan order).
  EXPECT_LE(fused.timeline.launches, static_cast<int>(fused.buckets) / 2 + 1);
}

TEST(FusedBucketLaunches, TinyGptIsBitwiseTheUnfusedRunWithFewerLaunches) {
  const ModelFactory gpt = transformer_factory(testing::tiny_gpt_config());
  auto batch = [](int s) { return testing::lm_batch(8, static_cast<uint32_t>(200 + s)); };
  const TrainRun fused = train(gpt, small_buckets(true), 5, batch);
  const TrainRun alone = train(gpt, small_buckets(false), 5, batch);
  expect_fusion_changes_only_the_launches(fused, alone);
  EXPECT_EQ(alone.timeline.launches, static_cast<int>(alone.buckets));
}

TEST(FusedBucketLaunches, ZeroStage2IsBitwiseTheUnfusedRunWithFewerLaunches) {
  const ModelFactory mlp = mlp_factory({20, 32, 16, 10});
  const TrainRun fused =
      train(mlp, small_buckets(true, DType::kF32, ShardMode::kGradients), 10, mlp_batch);
  const TrainRun alone =
      train(mlp, small_buckets(false, DType::kF32, ShardMode::kGradients), 10, mlp_batch);
  expect_fusion_changes_only_the_launches(fused, alone);
  EXPECT_EQ(alone.timeline.launches, static_cast<int>(alone.buckets));     // one group per bucket
  EXPECT_GE(alone.timeline.collectives, static_cast<int>(alone.buckets));  // a reduce per owner
  // And bitwise the unsharded run (one micro-batch on host devices, Note [Sharded gradients]).
  EXPECT_EQ(fused.parameters, train(mlp, small_buckets(true), 10, mlp_batch).parameters);
}

// bf16 rounds each gradient to 8 significant bits (relative error up to 2^-9) before and after
// the sum, so training takes a slightly different path: over 50 steps on 4 recurring batches
// (the loss falls from about 2.4 as the MLP fits them) every step's loss stays within 2% of the
// f32 reduction's.
TEST(Bf16GradientReduction, TracksTheF32ReductionAndKeepsReplicasBitwiseEqual) {
  const ModelFactory mlp = mlp_factory({20, 32, 16, 10});
  auto batch = [](int s) { return random_batch(32, 20, static_cast<uint32_t>(100 + s % 4)); };
  DataParallelOptions f32_options, bf16_options;
  bf16_options.buckets.reduce_dtype = DType::kBF16;
  const TrainRun f32 = train(mlp, f32_options, 50, batch);
  const TrainRun bf16 = train(mlp, bf16_options, 50, batch);  // checks that the replicas agree
  ASSERT_EQ(bf16.losses.size(), 50u);
  EXPECT_LT(f32.losses.back(), 0.9 * f32.losses.front()) << "the MLP should fit its 4 batches";
  double worst = 0;
  for (size_t s = 0; s < f32.losses.size(); ++s) {
    worst = std::max(worst, std::abs(static_cast<double>(bf16.losses[s]) - f32.losses[s]) /
                                std::abs(static_cast<double>(f32.losses[s])));
  }
  EXPECT_LT(worst, 0.02) << "bf16 loss drifted from f32's by up to " << worst * 100 << "%";
  EXPECT_NE(bf16.parameters, f32.parameters) << "bf16 reduction should round the gradients";
  // The parameters as a whole stay close too (single near-zero ones may not, relatively).
  double diff = 0, norm = 0;
  for (size_t i = 0; i < f32.parameters.size(); ++i) {
    diff += std::pow(static_cast<double>(bf16.parameters[i]) - f32.parameters[i], 2);
    norm += std::pow(static_cast<double>(f32.parameters[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 0.01) << "relative L2 distance of the parameters";
  std::printf("bf16 vs f32 reduction over 50 steps: loss within %.3f%%, parameters %.4f%% (L2)\n",
              worst * 100, 100 * std::sqrt(diff / norm));
}

TEST(Bf16GradientReduction, FusedAndSmallBucketsAreBitwiseTheUnfusedRun) {
  const ModelFactory mlp = mlp_factory({20, 32, 16, 10});
  const TrainRun fused = train(mlp, small_buckets(true, DType::kBF16), 10, mlp_batch);
  const TrainRun alone = train(mlp, small_buckets(false, DType::kBF16), 10, mlp_batch);
  expect_fusion_changes_only_the_launches(fused, alone);
  // The bucket plan does not change the bf16 sums either (element-wise rounding).
  DataParallelOptions one_bucket;
  one_bucket.buckets.reduce_dtype = DType::kBF16;
  EXPECT_EQ(fused.parameters, train(mlp, one_bucket, 10, mlp_batch).parameters);
}

TEST(Bf16GradientReduction, WorksWithShardedOptimizerState) {
  const ModelFactory mlp = mlp_factory({20, 32, 16, 10});
  const TrainRun zero1 =
      train(mlp, small_buckets(true, DType::kBF16, ShardMode::kOptimizer), 5, mlp_batch);
  EXPECT_EQ(zero1.parameters,
            train(mlp, small_buckets(true, DType::kBF16), 5, mlp_batch).parameters);
}

TEST(Bf16GradientReduction, IsRefusedWithShardedGradients) {
  try {
    train(mlp_factory({20, 16, 10}), small_buckets(true, DType::kBF16, ShardMode::kGradients), 1,
          mlp_batch);
    FAIL() << "bf16 reduction with ZeRO-2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("does not work with sharded gradients"), std::string::npos)
        << e.message();
    EXPECT_NE(e.message().find("reduce_dtype = DType::kF32"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace ls
