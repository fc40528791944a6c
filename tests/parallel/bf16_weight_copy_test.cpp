// The bf16 copy of the weights (Note [The bf16 copy of the weights],
// engine/model/nn/parameter_store.h): training in bf16 with the copy is bitwise training without
// it (weights rounded in every product), in every way the engine writes parameters: the
// optimizer's fused pass (SGD and AdamW), ZeRO's all-gather of updated shards, micro-batches,
// the initial broadcast, steps replayed as graphs, and a checkpoint load.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/data_parallel.h>
#include "training_helpers.h"

namespace ls {
namespace {

using testing::hosts;
using testing::lm_batch;
using testing::tiny_gpt_config;

struct Training {
  std::vector<float> losses;
  std::vector<float> parameters;  // replica 0's flat buffer after the last step
};

std::unique_ptr<DataParallel> make(int devices, bool copy, DataParallelOptions options,
                                   OptimizerFactory optimizer) {
  options.precision = Precision::kBF16;
  options.bf16_weight_copy = copy;
  return std::make_unique<DataParallel>(hosts(devices), transformer_factory(tiny_gpt_config()),
                                        std::move(optimizer), options);
}

void train(DataParallel& dp, int from, int to, Training& run) {
  for (int s = from; s < to; ++s) {
    run.losses.push_back(dp.step(lm_batch(16, 500 + static_cast<uint32_t>(s))).loss);
  }
  run.parameters = dp.parameters(0);
}

Training train(int devices, bool copy, const DataParallelOptions& options,
               OptimizerFactory optimizer, int steps) {
  Training run;
  train(*make(devices, copy, options, std::move(optimizer)), 0, steps, run);
  return run;
}

void expect_bitwise_equal(const Training& with, const Training& without, const std::string& what) {
  EXPECT_EQ(with.losses, without.losses) << what;
  ASSERT_EQ(with.parameters.size(), without.parameters.size()) << what;
  size_t differ = 0;
  for (size_t i = 0; i < with.parameters.size(); ++i) {
    differ += std::memcmp(&with.parameters[i], &without.parameters[i], sizeof(float)) != 0;
  }
  EXPECT_EQ(differ, 0u) << what << ": parameters that differ, of " << with.parameters.size();
}

struct Mode {
  std::string name;
  int devices;
  DataParallelOptions options;
  OptimizerFactory optimizer;
};

TEST(Bf16WeightCopy, TrainsBitwiseAsRoundingInEveryProduct) {
  const OptimizerFactory adamw = make_optimizer_factory({"adamw", 3e-3f});
  DataParallelOptions plain, zero1, zero2, micro, graphs;
  plain.graphs = false;
  zero1 = zero2 = micro = plain;
  zero1.shard = ShardMode::kOptimizer;
  zero2.shard = ShardMode::kGradients;
  micro.accumulate = 2;
  graphs.graphs = true;
  graphs.graph_warmup = 1;
  const std::vector<Mode> modes = {
      {"1 device, adamw", 1, plain, adamw},
      {"2 devices, momentum sgd", 2, plain, testing::momentum_sgd()},
      {"2 devices, ZeRO-1", 2, zero1, adamw},
      {"2 devices, ZeRO-2", 2, zero2, adamw},
      {"2 devices, 2 micro-batches", 2, micro, adamw},
      {"2 devices, steps as graphs", 2, graphs, adamw},
  };
  for (const Mode& m : modes) {
    const Training with = train(m.devices, true, m.options, m.optimizer, 6);
    const Training without = train(m.devices, false, m.options, m.optimizer, 6);
    expect_bitwise_equal(with, without, m.name);
  }
}

// A checkpoint load writes the parameters from the host: the copy follows them, so the resumed
// run is bitwise the run without the copy that was never interrupted.
TEST(Bf16WeightCopy, FollowsACheckpointLoad) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "lockstep-bf16-weight-copy-test";
  std::filesystem::remove_all(dir);
  const OptimizerFactory adamw = make_optimizer_factory({"adamw", 3e-3f});
  DataParallelOptions options;
  options.graphs = false;
  const Training whole = train(2, false, options, adamw, 6);

  Training resumed;
  {
    auto first = make(2, true, options, adamw);
    train(*first, 0, 3, resumed);
    first->save(dir.string());
  }
  auto second = make(2, true, options, adamw);  // its copy holds its own initial weights
  second->load(dir.string());
  train(*second, 3, 6, resumed);
  expect_bitwise_equal(resumed, whole, "resumed at step 3");
  std::filesystem::remove_all(dir);
}

// Each replica's state bytes count the copy: 2 bytes per element of the flat parameter buffer.
TEST(Bf16WeightCopy, IsCountedInTheParameterBytes) {
  DataParallelOptions options;
  options.graphs = false;
  const OptimizerFactory adamw = make_optimizer_factory({"adamw", 3e-3f});
  const int64_t with = make(1, true, options, adamw)->state_bytes(0).parameters;
  const int64_t without = make(1, false, options, adamw)->state_bytes(0).parameters;
  EXPECT_EQ(with, without + without / 2);
}

}  // namespace
}  // namespace ls
