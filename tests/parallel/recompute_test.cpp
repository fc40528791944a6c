// Activation checkpointing (Recompute::kBlocks, Tape::recomputable; issue 26) on host devices:
// bitwise the run without it (a GPT with dropout, so each recomputed forward must draw the same
// masks; an MLP; with ZeRO-2's gradient storage; a pipeline), and a lower allocator peak where
// a block's intermediates outweigh its input (a GPT of 4 blocks).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/module.h>
#include <lockstep/pipeline.h>
#include <lockstep/transformer_config.h>
#include "engine/core/runtime.h"
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;

nn::TransformerConfig gpt_with_dropout(int layers) {
  nn::TransformerConfig c = testing::tiny_gpt_config();
  c.layers = layers;
  c.dropout = 0.1f;
  return c;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> parameters;
  int64_t peak_bytes = 0;  // the most replica 0's allocator held over the steps
};

TrainRun train_data_parallel(const ModelFactory& model, Recompute recompute, ShardMode shard,
                             bool tokens, int steps = 4) {
  DataParallelOptions options;
  options.recompute = recompute;
  options.shard = shard;
  options.buckets.cap_bytes = 2048;  // several buckets: hooks must fire as without recompute
  options.buckets.first_bucket_bytes = 2048;
  DataParallel dp(hosts(2), model, make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}), options);
  device_runtime(hosts(2)[0]).allocator().reset_peak();
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    const uint32_t seed = 70 + static_cast<uint32_t>(s);
    run.losses.push_back(
        dp.step(tokens ? testing::lm_batch(6, seed) : testing::random_batch(12, 20, seed)).loss);
  }
  run.parameters = dp.parameters(0);
  EXPECT_EQ(dp.parameters(1), run.parameters) << "replicas disagree";
  run.peak_bytes = dp.allocator_stats(0).peak_bytes_in_use;
  return run;
}

TEST(Recomputation, AGptWithDropoutIsBitwiseTheRunWithoutIt) {
  const ModelFactory gpt = transformer_factory(gpt_with_dropout(2));
  for (ShardMode shard : {ShardMode::kNone, ShardMode::kGradients}) {
    const TrainRun plain = train_data_parallel(gpt, Recompute::kNone, shard, true);
    const TrainRun again = train_data_parallel(gpt, Recompute::kBlocks, shard, true);
    EXPECT_EQ(again.losses, plain.losses) << shard_mode_name(shard);
    EXPECT_EQ(again.parameters, plain.parameters) << shard_mode_name(shard);
  }
}

TEST(Recomputation, AnMlpsLayersAreBitwiseTheRunWithoutThem) {
  const ModelFactory mlp = mlp_factory({20, 33, 17, 10});
  const TrainRun plain = train_data_parallel(mlp, Recompute::kNone, ShardMode::kNone, false);
  const TrainRun again = train_data_parallel(mlp, Recompute::kBlocks, ShardMode::kNone, false);
  EXPECT_EQ(again.losses, plain.losses);
  EXPECT_EQ(again.parameters, plain.parameters);
}

// A block keeps only its input: 4 blocks of hidden 64 over sequences of 8 hold their attention
// and MLP intermediates (several times the input each) only while one of them is recomputed.
TEST(Recomputation, AGptsPeakMemoryFallsWhenItsBlocksKeepOnlyTheirInput) {
  nn::TransformerConfig c = gpt_with_dropout(4);
  c.hidden = 64;
  c.ffn = 256;
  c.heads = 4;
  const ModelFactory gpt = transformer_factory(c);
  const TrainRun plain = train_data_parallel(gpt, Recompute::kNone, ShardMode::kNone, true, 3);
  const TrainRun again = train_data_parallel(gpt, Recompute::kBlocks, ShardMode::kNone, true, 3);
  EXPECT_EQ(again.losses, plain.losses);
  EXPECT_LT(again.peak_bytes, plain.peak_bytes)
      << "peak " << again.peak_bytes << " B with recompute, " << plain.peak_bytes << " B without";
}

TEST(Recomputation, APipelinesStagesAreBitwiseTheRunWithoutIt) {
  std::vector<std::vector<float>> parameters;
  std::vector<std::vector<float>> losses;
  for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
    PipelineOptions options;
    options.stages = 2;
    options.micro_batches = 3;
    options.recompute = recompute;
    Pipeline pipe(hosts(2), transformer_factory(gpt_with_dropout(2)),
                  make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}), options);
    losses.emplace_back();
    for (int s = 0; s < 3; ++s) {
      losses.back().push_back(pipe.step(testing::lm_batch(6, 90 + static_cast<uint32_t>(s))).loss);
    }
    parameters.emplace_back();
    for (const NamedParameter& p : pipe.model_parameters()) {
      parameters.back().insert(parameters.back().end(), p.values.begin(), p.values.end());
    }
  }
  EXPECT_EQ(losses[1], losses[0]);
  EXPECT_EQ(parameters[1], parameters[0]);
}

// Counts its forward passes: a recomputed layer runs twice per micro-batch, once in forward and
// once in backward.
class CountingGelu final : public nn::Module {
 public:
  explicit CountingGelu(std::shared_ptr<std::atomic<int>> calls) : calls_(std::move(calls)) {}
  Var forward(Tape& tape, const Var& x) override {
    ++*calls_;
    return nn::gelu(tape, x);
  }

 private:
  std::shared_ptr<std::atomic<int>> calls_;
};

// A model of one's own: a block run through Tape::recomputable is recomputed like the built-in
// ones. The block's input is used after it too (a skip connection around it), so its gradient
// sums contributions from outside and inside the block, which must come in the plain run's order.
class SkipAroundABlock final : public nn::Module {
 public:
  explicit SkipAroundABlock(std::shared_ptr<std::atomic<int>> calls) {
    first_ = &register_module("first", std::make_unique<nn::Linear>(20, 32));
    middle_ = &register_module("middle", std::make_unique<nn::Linear>(32, 32));
    gelu_ = &register_module("gelu", std::make_unique<CountingGelu>(std::move(calls)));
    last_ = &register_module("last", std::make_unique<nn::Linear>(32, 10));
  }
  Var forward(Tape& tape, const Var& x) override {
    const Var a = first_->forward(tape, x);
    nn::Linear* middle = middle_;
    CountingGelu* gelu = gelu_;
    const Var b = tape.recomputable(a, [middle, gelu](Tape& t, const Var& in) {
      return gelu->forward(t, middle->forward(t, in));
    });
    return last_->forward(tape, nn::add(tape, b, a));
  }

 private:
  nn::Linear* first_;
  nn::Linear* middle_;
  CountingGelu* gelu_;
  nn::Linear* last_;
};

TEST(Recomputation, AModelsOwnBlockRunsTwiceAndIsBitwiseTheRunWithoutIt) {
  TrainRun runs[2];
  int calls_made[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    auto calls = std::make_shared<std::atomic<int>>(0);
    const ModelFactory model = [calls] {
      return std::unique_ptr<nn::Module>(new SkipAroundABlock(calls));
    };
    runs[r] = train_data_parallel(model, r == 0 ? Recompute::kNone : Recompute::kBlocks,
                                  ShardMode::kNone, false);
    calls_made[r] = calls->load();
  }
  // Each forward the host runs (2 eager steps and the graph's capture on each replica: the graph
  // replays without calling it) runs the block once, and again in backward when recomputed.
  EXPECT_EQ(calls_made[0], 6);
  EXPECT_EQ(calls_made[1], 2 * calls_made[0]);
  EXPECT_EQ(runs[1].losses, runs[0].losses);
  EXPECT_EQ(runs[1].parameters, runs[0].parameters);
}

// A pipeline's stages recompute their Sequential children too: each micro-batch's layer runs
// again in its backward.
TEST(Recomputation, APipelineStageRecomputesItsLayers) {
  for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
    auto calls = std::make_shared<std::atomic<int>>(0);
    const ModelFactory model = [calls] {
      auto m = std::make_unique<nn::Sequential>();
      m->add(std::make_unique<nn::Linear>(20, 16));
      m->add(std::make_unique<CountingGelu>(calls));
      m->add(std::make_unique<nn::Linear>(16, 10));
      return std::unique_ptr<nn::Module>(std::move(m));
    };
    PipelineOptions options;
    options.stages = 2;
    options.micro_batches = 3;
    options.recompute = recompute;
    Pipeline pipe(hosts(2), model, make_optimizer_factory({"sgd", 0.01f}), options);
    const int probes = calls->load();  // the planner's probe models, built before the stages
    pipe.step(testing::random_batch(6, 20, 5));
    EXPECT_EQ(calls->load() - probes, recompute == Recompute::kBlocks ? 6 : 3)
        << recompute_name(recompute);
  }
}

}  // namespace
}  // namespace ls
