// ZeRO stage 3 (ShardMode::kParameters) on host devices: bitwise ZeRO-2, and so bitwise the
// unsharded run, for AdamW and SGD on 2, 3 and 4 devices with small and large buckets; a GPT with
// a tied embedding and dropout, with and without recomputed blocks; accumulated micro-batches and
// uneven shards; each replica keeps 1/N of the model state (16 bytes a parameter with AdamW) and
// its peak falls below ZeRO-2's by about the values it no longer keeps; evaluation over uneven
// rows (one replica with none); a non-finite gradient skips the step everywhere; checkpoints load
// across modes and device counts; bf16 is refused with a usage error.
#include <gtest/gtest.h>

#include <filesystem>
#include <limits>
#include <random>

#include "engine/core/runtime.h"
#include <lockstep/nn/module.h>
#include <lockstep/transformer_config.h>
#include "ops/elementwise.h"
#include <lockstep/data_parallel.h>
#include "parallel/nan_gradient.h"
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;

DataParallelOptions options_for(ShardMode mode, int64_t bucket_bytes = 25ll << 20,
                                int accumulate = 1) {
  DataParallelOptions o;
  o.shard = mode;
  o.buckets.cap_bytes = bucket_bytes;
  o.buckets.first_bucket_bytes = std::min<int64_t>(bucket_bytes, 1ll << 20);
  o.accumulate = accumulate;
  o.allow_uneven_shards = true;
  return o;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<float> parameters;
};

template <typename BatchOf>
TrainRun train(int devices, const ModelFactory& model, const OptimizerFactory& optimizer,
               const DataParallelOptions& options, int steps, BatchOf batch_of) {
  DataParallel dp(hosts(devices), model, optimizer, options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(dp.step(batch_of(s)).loss);
  run.parameters = dp.parameters(0);
  EXPECT_EQ(dp.parameters(devices - 1), run.parameters) << "replicas disagree";
  return run;
}

auto images(int64_t rows) {
  return [rows](int s) { return testing::random_batch(rows, 20, static_cast<uint32_t>(300 + s)); };
}
auto tokens(int64_t rows) {
  return [rows](int s) { return testing::lm_batch(rows, static_cast<uint32_t>(40 + s)); };
}

const OptimizerSpec kAdamW{"adamw", 1e-2f, 0.0f, 0.01f};
const OptimizerSpec kSgd{"sgd", 0.05f, 0.9f, 1e-4f};

// The first `n` values of `a` (the flat layouts of different device counts pad differently).
std::vector<float> prefix(const std::vector<float>& a, size_t n) {
  return std::vector<float>(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(n));
}

TEST(ShardedParameters, BitwiseZeroTwoAndTheUnshardedRunForAdamWAndSgd) {
  const ModelFactory model = mlp_factory({20, 33, 17, 10});  // 1614 parameters
  for (const OptimizerSpec& spec : {kAdamW, kSgd}) {
    for (int n : {2, 3, 4}) {
      // 1 KiB buckets: many buckets, and parameters cut by a range boundary (gathered from two).
      for (int64_t bucket : {int64_t{1} << 10, int64_t{25} << 20}) {
        const auto opt = make_optimizer_factory(spec);
        const std::string what =
            spec.kind + " on " + std::to_string(n) + ", buckets of " + std::to_string(bucket);
        const TrainRun plain =
            train(n, model, opt, options_for(ShardMode::kNone, bucket), 5, images(12));
        const TrainRun zero2 =
            train(n, model, opt, options_for(ShardMode::kGradients, bucket), 5, images(12));
        const TrainRun zero3 =
            train(n, model, opt, options_for(ShardMode::kParameters, bucket), 5, images(12));
        EXPECT_EQ(zero3.losses, zero2.losses) << what;
        EXPECT_EQ(zero3.parameters, zero2.parameters) << what;
        EXPECT_EQ(zero3.losses, plain.losses) << what;
        EXPECT_EQ(prefix(zero3.parameters, plain.parameters.size()), plain.parameters) << what;
      }
    }
  }
}

TEST(ShardedParameters, GptWithTiedEmbeddingDropoutAndRecomputeIsBitwiseZeroTwo) {
  // The tied token embedding is gathered for the lookup, dropped at the embeddings' end, gathered
  // again for the output head, and in backward held from the head to the lookup.
  nn::TransformerConfig config = testing::tiny_gpt_config();
  config.dropout = 0.1f;
  const ModelFactory gpt = transformer_factory(config);
  for (int n : {2, 3}) {
    for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
      std::vector<TrainRun> runs;
      for (ShardMode mode : {ShardMode::kGradients, ShardMode::kParameters}) {
        DataParallelOptions o = options_for(mode, 2048);
        o.recompute = recompute;
        runs.push_back(train(n, gpt, make_optimizer_factory(kAdamW), o, 4, tokens(6)));
      }
      const std::string what = std::to_string(n) + " devices, recompute " +
                               (recompute == Recompute::kBlocks ? "blocks" : "none");
      EXPECT_EQ(runs[1].losses, runs[0].losses) << what;
      EXPECT_EQ(runs[1].parameters, runs[0].parameters) << what;
    }
  }
}

TEST(ShardedParameters, AccumulatedMicroBatchesAndUnevenShardsAreBitwiseZeroTwo) {
  // Both reduce after every micro-batch, to the same owners: the same sums in the same order.
  const ModelFactory model = mlp_factory({20, 33, 17, 10});
  const auto sgd = testing::momentum_sgd();
  const TrainRun zero2 =
      train(3, model, sgd, options_for(ShardMode::kGradients, 1024, 2), 6, images(13));
  const TrainRun zero3 =
      train(3, model, sgd, options_for(ShardMode::kParameters, 1024, 2), 6, images(13));
  EXPECT_EQ(zero3.losses, zero2.losses);
  EXPECT_EQ(zero3.parameters, zero2.parameters);
}

TEST(ShardedParameters, OnOneDeviceItIsTheUnshardedRun) {
  const ModelFactory model = mlp_factory({20, 33, 17, 10});
  const auto opt = make_optimizer_factory(kAdamW);
  const TrainRun plain = train(1, model, opt, options_for(ShardMode::kNone), 3, images(12));
  const TrainRun zero3 = train(1, model, opt, options_for(ShardMode::kParameters), 3, images(12));
  EXPECT_EQ(zero3.losses, plain.losses);
  EXPECT_EQ(zero3.parameters, plain.parameters);
}

TEST(ShardedParameters, EachReplicaKeepsItsShareOfTheModelStateAndPeaksLower) {
  // 24 layers of 64 x 64 (100 K parameters) and 16 KiB buckets: one layer per bucket, so staging
  // and the gathered layers are small next to the model state.
  const ModelFactory deep = mlp_factory(std::vector<int64_t>(25, 64));
  const int64_t psi = 24 * (64 * 64 + 64);
  for (int n : {2, 4}) {
    int64_t peak[2] = {0, 0};  // ZeRO-2, ZeRO-3: the most any replica's allocator held in a step
    DataParallel::StateBytes zero2, zero3;
    for (ShardMode mode : {ShardMode::kGradients, ShardMode::kParameters}) {
      const int m = mode == ShardMode::kParameters ? 1 : 0;
      DataParallel dp(hosts(n), deep, make_optimizer_factory(kAdamW), options_for(mode, 16 << 10));
      for (const Device& d : hosts(n)) device_runtime(d).allocator().reset_peak();
      for (int s = 0; s < 2; ++s) dp.step(testing::random_batch(12, 64, 7 + s));
      for (int r = 0; r < n; ++r) {
        peak[m] = std::max(peak[m], dp.allocator_stats(r).peak_bytes_in_use);
      }
      (m == 1 ? zero3 : zero2) = dp.state_bytes(n - 1);
    }
    // Model state: 4 bytes of value, 4 of gradient and 8 of AdamW moments a parameter, over N
    // (the layout pads each parameter to 64 elements and the flat buffer to N equal ranges).
    const int64_t state = zero3.parameters + zero3.gradients + zero3.optimizer;
    EXPECT_NEAR(static_cast<double>(state), 16.0 * psi / n, 0.05 * 16.0 * psi / n) << n;
    EXPECT_EQ(zero3.gradients, zero2.gradients);
    EXPECT_EQ(zero3.optimizer, zero2.optimizer);
    EXPECT_NEAR(static_cast<double>(n * zero3.parameters), zero2.parameters,
                0.02 * zero2.parameters);
    // The peak falls by the values ZeRO-3 does not keep, less the few layers gathered at a time
    // (one 64 x 64 layer is 16.6 KB; eight allowed).
    const int64_t dropped = zero2.parameters - zero3.parameters;
    EXPECT_GE(peak[0] - peak[1], dropped - 8 * 16640)
        << n << " devices: peaks " << peak[0] << " and " << peak[1];
  }
}

data::Dataset image_set(int64_t count, int64_t features = 20) {
  std::mt19937 rng(6);
  std::normal_distribution<float> normal;
  data::Dataset d;
  d.name = "random images";
  d.count = count;
  d.features = features;
  d.classes = 10;
  for (int64_t i = 0; i < d.count * d.features; ++i) d.images.push_back(normal(rng));
  for (int64_t i = 0; i < d.count; ++i) d.labels.push_back(static_cast<int32_t>(rng() % 10));
  return d;
}

TEST(ShardedParameters, EvaluationMatchesZeroTwoOverUnevenRows) {
  // 3 devices: 53 rows split 17/18/18 in batches of 5 (replicas run different batch counts), and
  // 2 rows, where replica 0 has none (it must still take part in gathering the parameters).
  const ModelFactory model = mlp_factory({20, 33, 17, 10});
  for (int64_t count : {53, 2}) {
    std::vector<EvalResult> results;
    for (ShardMode mode : {ShardMode::kGradients, ShardMode::kParameters}) {
      DataParallel dp(hosts(3), model, make_optimizer_factory(kAdamW), options_for(mode));
      for (int s = 0; s < 2; ++s) dp.step(images(12)(s));
      results.push_back(dp.evaluate(image_set(count), 5));
    }
    EXPECT_EQ(results[1].examples, results[0].examples) << count;
    EXPECT_EQ(results[1].accuracy, results[0].accuracy) << count;
    EXPECT_EQ(results[1].loss, results[0].loss) << count;
  }
}

TEST(ShardedParameters, EvaluationGathersLayerByLayer) {
  // 24 layers of 64 x 64 (100 K parameters, 400 KB of values) on 4 devices: evaluating holds a
  // layer or two of them at a time (16.6 KB each) and a batch's activations, never all.
  const ModelFactory deep = mlp_factory(std::vector<int64_t>(25, 64));
  const int64_t value_bytes = 4 * 24 * (64 * 64 + 64);
  DataParallel dp(hosts(4), deep, make_optimizer_factory(kAdamW),
                  options_for(ShardMode::kParameters, 16 << 10));
  dp.step(testing::random_batch(12, 64, 7));
  std::vector<int64_t> before;
  for (const Device& d : hosts(4)) {
    device_runtime(d).allocator().reset_peak();
    before.push_back(device_runtime(d).allocator().stats().bytes_in_use);
  }
  const EvalResult result = dp.evaluate(image_set(37, 64), 8);  // 9 or 10 rows a replica
  EXPECT_EQ(result.examples, 37);
  for (int r = 0; r < 4; ++r) {
    const int64_t extra = dp.allocator_stats(r).peak_bytes_in_use - before[static_cast<size_t>(r)];
    EXPECT_LT(extra, value_bytes / 4) << "replica " << r << " held " << extra << " bytes more";
  }
}

TEST(ShardedParameters, ANonFiniteGradientInOneRangeSkipsTheStepOnEveryReplica) {
  const ModelFactory model = [] {
    auto seq = std::make_unique<nn::Sequential>();
    seq->add(std::make_unique<nn::Linear>(4, 64));
    seq->add(std::make_unique<testing::NaNGradientOn>(1, 2));
    seq->add(std::make_unique<nn::ReLU>());
    seq->add(std::make_unique<nn::Linear>(64, 64));
    seq->add(std::make_unique<nn::ReLU>());
    seq->add(std::make_unique<nn::Linear>(64, 10));
    return std::unique_ptr<nn::Module>(std::move(seq));
  };
  DataParallel dp(hosts(2), model, make_optimizer_factory(kAdamW),
                  options_for(ShardMode::kParameters));
  const data::Batch batch = testing::random_batch(8, 4, 5);
  EXPECT_FALSE(dp.step(batch).skipped);
  const std::vector<float> before = dp.parameters(0);
  const StepResult poisoned = dp.step(batch);
  EXPECT_TRUE(poisoned.skipped);
  EXPECT_TRUE(std::isfinite(poisoned.loss)) << "the skip must come from the gradients";
  EXPECT_EQ(dp.parameters(0), before);
  EXPECT_FALSE(dp.step(batch).skipped);
}

TEST(ShardedParameters, CheckpointsLoadAcrossModesAndDeviceCounts) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lockstep-zero3-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const ModelFactory model = mlp_factory({20, 33, 17, 10});
  const auto opt = make_optimizer_factory(kAdamW);
  const TrainRun straight = train(2, model, opt, options_for(ShardMode::kNone), 6, images(12));
  std::vector<DataParallel::NamedParameter> saved;
  {
    DataParallel dp(hosts(2), model, opt, options_for(ShardMode::kParameters));
    for (int s = 0; s < 3; ++s) dp.step(images(12)(s));
    dp.save(dir.string());
    saved = dp.named_parameters(0);
  }
  // Into another mode on the same devices: it goes on exactly as the run that never stopped.
  for (ShardMode mode : {ShardMode::kNone, ShardMode::kParameters}) {
    DataParallel dp(hosts(2), model, opt, options_for(mode));
    dp.load(dir.string());
    for (int s = 3; s < 6; ++s) dp.step(images(12)(s));
    EXPECT_EQ(prefix(dp.parameters(0), straight.parameters.size()), straight.parameters)
        << shard_mode_name(mode);
  }
  // Into ZeRO-3 on 3 and 4 devices and plain on 1: the parameters as saved (whole tensors).
  for (auto [n, mode] : {std::pair{3, ShardMode::kParameters}, std::pair{4, ShardMode::kParameters},
                         std::pair{1, ShardMode::kNone}}) {
    DataParallel dp(hosts(n), model, opt, options_for(mode));
    dp.load(dir.string());
    const auto loaded = dp.named_parameters(n - 1);
    ASSERT_EQ(loaded.size(), saved.size());
    for (size_t i = 0; i < loaded.size(); ++i) {
      EXPECT_EQ(loaded[i].name, saved[i].name);
      EXPECT_EQ(loaded[i].values, saved[i].values) << saved[i].name << " on " << n;
    }
    dp.step(images(12)(3));  // and it trains on from there
  }
  std::filesystem::remove_all(dir);
}

TEST(ShardedParameters, MixedPrecisionIsAUsageError) {
  DataParallelOptions o = options_for(ShardMode::kParameters);
  o.precision = Precision::kBF16;
  try {
    DataParallel dp(hosts(2), mlp_factory({20, 10}), make_optimizer_factory(kAdamW), o);
    FAIL() << "bf16 with sharded parameters was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32 only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ls
