// Steps the host never waits on, and steps as graphs (issue 12), on host devices: a graph launch
// computes bitwise what the eager step computes, for every way a step can be set up; a step of
// another shape, or a model with dropout, runs eagerly and says so once; step_async() returns
// before the devices are done, lets the caller reuse its batch at once, and reports each step's
// result (and failure) in order.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "engine/model/optim/optimizer.h"
#include "ops/elementwise.h"
#include "ops/softmax_xent.h"
#include <lockstep/data_parallel.h>
#include "random_batch.h"
#include "training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::lm_batch;
using testing::momentum_sgd;
using testing::random_batch;
using testing::tiny_gpt_config;

struct TrainSetup {
  std::string name;
  bool gpt = false;
  DataParallelOptions options;
  int devices = 2;
  OptimizerFactory optimizer = make_optimizer_factory({});  // AdamW
};

TrainSetup named(const char* name, bool gpt = false) {
  TrainSetup setup;
  setup.name = name;
  setup.gpt = gpt;
  return setup;
}

struct TrainRun {
  std::vector<float> losses;
  std::vector<bool> skipped;
  std::vector<float> parameters;
  int64_t launches = 0;
};

data::Batch batch_for(const TrainSetup& setup, int64_t size, uint32_t seed) {
  return setup.gpt ? lm_batch(size, seed) : random_batch(size, 20, seed);
}

TrainRun train(const TrainSetup& setup, bool graphs, int steps,
               const std::vector<int64_t>& sizes = {16}) {
  DataParallelOptions options = setup.options;
  options.graphs = graphs;
  nn::TransformerConfig gpt = tiny_gpt_config();
  ModelFactory model = setup.gpt ? transformer_factory(gpt) : mlp_factory({20, 32, 32, 10});
  DataParallel dp(hosts(setup.devices), model, setup.optimizer, options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    const int64_t size = sizes[static_cast<size_t>(s) % sizes.size()];
    const StepResult r = dp.step(batch_for(setup, size, 7 + static_cast<uint32_t>(s)));
    run.losses.push_back(r.loss);
    run.skipped.push_back(r.skipped);
  }
  run.parameters = dp.parameters(0);
  run.launches = dp.graph_launches();
  EXPECT_EQ(run.parameters, dp.parameters(setup.devices - 1)) << setup.name << ": replicas differ";
  return run;
}

std::vector<TrainSetup> setups() {
  std::vector<TrainSetup> out;
  out.push_back(named("mlp"));
  out.push_back(named("gpt", true));
  TrainSetup zero1 = named("mlp zero-1");
  zero1.options.shard = ShardMode::kOptimizer;
  out.push_back(zero1);
  TrainSetup zero2 = named("gpt zero-2", true);
  zero2.options.shard = ShardMode::kGradients;
  zero2.options.buckets.cap_bytes = 4 << 10;
  out.push_back(zero2);
  TrainSetup accumulate = named("mlp accumulate 2, sgd");
  accumulate.options.accumulate = 2;
  accumulate.optimizer = momentum_sgd();
  out.push_back(accumulate);
  TrainSetup bf16 = named("gpt bf16, bf16 gradients, small buckets", true);
  bf16.options.precision = Precision::kBF16;
  bf16.options.buckets.reduce_dtype = DType::kBF16;
  bf16.options.buckets.cap_bytes = 2 << 10;
  out.push_back(bf16);
  TrainSetup f16 = named("gpt f16, loss scaling", true);
  f16.options.precision = Precision::kF16;
  out.push_back(f16);
  TrainSetup one = named("mlp one device");
  one.devices = 1;
  out.push_back(one);
  return out;
}

TEST(StepGraphs, LaunchesAreBitwiseTheEagerSteps) {
  constexpr int kSteps = 8;
  for (const TrainSetup& setup : setups()) {
    const TrainRun eager = train(setup, false, kSteps);
    const TrainRun graph = train(setup, true, kSteps);
    EXPECT_EQ(eager.launches, 0) << setup.name;
    // Two warm-up steps, then the third is captured and launched, and so on.
    EXPECT_EQ(graph.launches, kSteps - 2) << setup.name;
    EXPECT_EQ(graph.losses, eager.losses) << setup.name;
    EXPECT_EQ(graph.skipped, eager.skipped) << setup.name;
    EXPECT_EQ(graph.parameters, eager.parameters) << setup.name;
  }
}

TEST(StepGraphs, AnotherShapeRunsEagerlyAndSaysSoOnce) {
  TrainSetup setup = named("mlp");
  std::vector<std::string> notices;
  setup.options.notice = [&](const std::string& m) { notices.push_back(m); };
  // 16-row steps, with a 12-row step (an epoch's last batch) every fourth step.
  const std::vector<int64_t> sizes{16, 16, 16, 12};
  const TrainRun graph = train(setup, true, 12, sizes);
  setup.options.notice = nullptr;
  const TrainRun eager = train(setup, false, 12, sizes);
  EXPECT_EQ(graph.losses, eager.losses);
  EXPECT_EQ(graph.parameters, eager.parameters);
  // Steps 3, 5, 6, 7, 9, 10, 11 launch the graph (1, 2 warm it up; 4, 8, 12 have 12 rows).
  EXPECT_EQ(graph.launches, 7);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("another shape"), std::string::npos) << notices[0];
}

TEST(StepGraphs, DropoutKeepsStepsEagerAndSaysWhy) {
  nn::TransformerConfig config = tiny_gpt_config();
  config.dropout = 0.1f;
  std::vector<std::string> notices;
  DataParallelOptions options;
  options.notice = [&](const std::string& m) { notices.push_back(m); };
  DataParallel dp(hosts(2), transformer_factory(config), make_optimizer_factory({}), options);
  for (int s = 0; s < 5; ++s) dp.step(lm_batch(8, static_cast<uint32_t>(s)));
  EXPECT_EQ(dp.graph_launches(), 0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("dropout"), std::string::npos) << notices[0];
}

TEST(StepGraphs, GraphLaunchesAreOneHostCallOfManyNodes) {
  DataParallel dp(hosts(2), transformer_factory(tiny_gpt_config()), make_optimizer_factory({}));
  for (int s = 0; s < 3; ++s) dp.step(lm_batch(8, static_cast<uint32_t>(s)));
  EXPECT_EQ(dp.graph_launches(), 1);
  // Every op of forward, backward, the all-reduces and the optimizer is a node of the graph.
  EXPECT_GT(dp.graph_nodes(), 100);
}

TEST(StepAsync, ResultsInOrderEqualWaitedSteps) {
  constexpr int kSteps = 9;
  std::vector<data::Batch> batches;
  for (int s = 0; s < kSteps; ++s) batches.push_back(lm_batch(8, 40 + static_cast<uint32_t>(s)));
  DataParallel waited(hosts(2), transformer_factory(tiny_gpt_config()), make_optimizer_factory({}));
  std::vector<float> expected;
  for (const data::Batch& b : batches) expected.push_back(waited.step(b).loss);

  DataParallelOptions options;
  options.steps_in_flight = 3;
  DataParallel queued(hosts(2), transformer_factory(tiny_gpt_config()), make_optimizer_factory({}),
                      options);
  // One batch object, overwritten as soon as step_async returns: the engine staged it.
  data::Batch reused = batches[0];
  std::vector<int64_t> numbers;
  for (const data::Batch& b : batches) {
    reused.tokens = b.tokens;
    reused.labels = b.labels;
    numbers.push_back(queued.step_async(reused));
    std::fill(reused.tokens.begin(), reused.tokens.end(), 0);
    std::fill(reused.labels.begin(), reused.labels.end(), 1);
  }
  ASSERT_EQ(numbers, (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  std::vector<float> losses;
  for (int64_t n : numbers) losses.push_back(queued.result(n).loss);
  EXPECT_EQ(losses, expected);
  EXPECT_EQ(queued.parameters(0), waited.parameters(0));
}

TEST(StepAsync, ResultsAreTakenOnceAndOnlyForQueuedSteps) {
  DataParallel dp(hosts(2), mlp_factory({20, 10}), make_optimizer_factory({}));
  const int64_t first = dp.step_async(random_batch(8, 20, 1));
  const int64_t second = dp.step_async(random_batch(8, 20, 2));
  EXPECT_TRUE(std::isfinite(dp.result(second).loss));  // reads the first on the way
  EXPECT_TRUE(std::isfinite(dp.result(first).loss));
  EXPECT_THROW(dp.result(first), Error);  // taken already
  EXPECT_THROW(dp.result(0), Error);
  EXPECT_THROW(dp.result(3), Error);  // never enqueued
  for (int bad : {0, 4}) {
    DataParallelOptions options;
    options.steps_in_flight = bad;
    EXPECT_THROW(DataParallel(hosts(1), mlp_factory({20, 10}), make_optimizer_factory({}), options),
                 Error)
        << bad;
  }
}

TEST(StepAsync, AFailingStepIsReportedWithItsNumber) {
  DataParallel dp(hosts(2), mlp_factory({20, 10}), make_optimizer_factory({}));
  dp.step_async(random_batch(8, 20, 1));
  data::Batch bad = random_batch(8, 20, 2);
  bad.labels[6] = 12;  // out of range, in replica 1's shard: raised by its stream later
  std::string what;
  try {
    const int64_t n = dp.step_async(bad);
    dp.step_async(random_batch(8, 20, 3));
    dp.result(n);
  } catch (const Error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("replica 1 on host:1 failed in step (step 2, device work)"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("label 12"), std::string::npos) << what;
  EXPECT_THROW(dp.step_async(random_batch(8, 20, 4)), Error);  // unusable after a failure
}

// An optimizer of the application's own, which knows nothing of the StepControl.
class PlainSgd final : public optim::Optimizer {
 public:
  void step(const Tensor& params, const Tensor& grads, Stream& stream) override {
    axpy(-0.1f, grads, params, stream);
    ++steps_;
  }
  std::string name() const override { return "plain-sgd"; }
  std::vector<std::pair<std::string, Tensor>> state() const override { return {}; }
  float learning_rate() const override { return 0.1f; }
  void set_learning_rate(float) override {}
};

OptimizerFactory plain_sgd() {
  return [](const Tensor&, Stream&) { return std::make_unique<PlainSgd>(); };
}

TEST(StepGraphs, AnOptimizerThatIgnoresTheDeviceDecisionIsSteppedByTheHost) {
  std::vector<std::string> notices;
  DataParallelOptions options;
  options.notice = [&](const std::string& m) { notices.push_back(m); };
  DataParallel dp(hosts(2), mlp_factory({20, 10}), plain_sgd(), options);
  for (int s = 0; s < 4; ++s) EXPECT_FALSE(dp.step(random_batch(8, 20, 1)).skipped);
  const std::vector<float> before = dp.parameters(0);
  data::Batch poisoned = random_batch(8, 20, 2);
  poisoned.images[3] = std::nanf("");
  EXPECT_TRUE(dp.step(poisoned).skipped);
  EXPECT_EQ(dp.parameters(0), before) << "a skipped step changed the parameters";
  EXPECT_EQ(dp.graph_launches(), 0);
  ASSERT_EQ(notices.size(), 1u);
  EXPECT_NE(notices[0].find("plain-sgd"), std::string::npos) << notices[0];
  options.precision = Precision::kF16;  // it would not undo the loss scale
  EXPECT_THROW(DataParallel(hosts(1), mlp_factory({20, 10}), plain_sgd(), options), Error);
}

TEST(StepGraphs, CheckpointsAndEvaluationBetweenLaunchesKeepThemBitwiseEager) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "lockstep_graph_checkpoint_test";
  auto run = [&](bool graphs) {
    std::filesystem::remove_all(dir);
    DataParallelOptions options;
    options.graphs = graphs;
    auto make = [&] {
      return std::make_unique<DataParallel>(hosts(2), transformer_factory(tiny_gpt_config()),
                                            make_optimizer_factory({}), options);
    };
    auto dp = make();
    std::vector<float> losses;
    for (int s = 0; s < 5; ++s)
      losses.push_back(dp->step(lm_batch(8, 60 + static_cast<uint32_t>(s))).loss);
    dp->save(dir.string());
    data::Dataset held_out;
    held_out.name = "held out";
    held_out.classes = 20;
    const data::Batch b = lm_batch(6, 99);  // another shape than the steps'
    held_out.count = b.size;
    held_out.features = b.features;
    held_out.label_width = b.label_width;
    held_out.tokens = b.tokens;
    held_out.labels = b.labels;
    losses.push_back(static_cast<float>(dp->evaluate(held_out, 3).loss));
    for (int s = 5; s < 8; ++s)
      losses.push_back(dp->step(lm_batch(8, 60 + static_cast<uint32_t>(s))).loss);
    dp->load(dir.string());  // back to step 5, into the tensors the graph reads
    for (int s = 5; s < 8; ++s)
      losses.push_back(dp->step(lm_batch(8, 60 + static_cast<uint32_t>(s))).loss);
    EXPECT_EQ(dp->graph_launches(), graphs ? 9 : 0);
    return std::pair{losses, dp->parameters(0)};
  };
  const auto eager = run(false);
  const auto graph = run(true);
  EXPECT_EQ(graph.first, eager.first);
  EXPECT_EQ(graph.second, eager.second);
  std::filesystem::remove_all(dir);
}

TEST(StepAsync, DestroyingWithStepsQueuedWaitsForThem) {
  std::vector<float> after_queue;
  {
    DataParallel dp(hosts(2), mlp_factory({20, 10}), make_optimizer_factory({}));
    dp.step_async(random_batch(8, 20, 1));
    dp.step_async(random_batch(8, 20, 2));
  }  // no result taken: the destructor waits for both, under the watchdog
  DataParallel again(hosts(2), mlp_factory({20, 10}), make_optimizer_factory({}));
  again.step_async(random_batch(8, 20, 1));
  EXPECT_EQ(again.steps_taken(), 1);
}

}  // namespace
}  // namespace ls
