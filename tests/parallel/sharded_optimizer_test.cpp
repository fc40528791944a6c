// ZeRO stage 1 (ShardMode::kOptimizer) on host devices: bitwise the unsharded run on the same
// devices for AdamW and SGD with momentum, for parameter counts that do not divide by the
// device count; each replica holds about 1/N of the optimizer state (allocator-measured);
// checkpoints hold whole tensors and load across modes and device counts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <lockstep/data_parallel.h>
#include "parallel/random_batch.h"

namespace ls {
namespace {

std::vector<Device> hosts(int n) { return parse_devices("host:" + std::to_string(n)); }

DataParallelOptions with_shard(ShardMode mode) {
  DataParallelOptions o;
  o.shard = mode;
  return o;
}

// 20-33-17-10: 1614 parameters, padded per parameter to 64 and then to equal shards.
ModelFactory model() { return mlp_factory({20, 33, 17, 10}); }

std::vector<float> train(int devices, ShardMode mode, const OptimizerSpec& spec, int steps) {
  DataParallel dp(hosts(devices), model(), make_optimizer_factory(spec), with_shard(mode));
  for (int s = 0; s < steps; ++s) {
    dp.step(testing::random_batch(12, 20, static_cast<uint32_t>(200 + s)));
  }
  return dp.parameters(0);
}

TEST(ShardedOptimizer, BitwiseTheUnshardedRunForAdamWAndSgd) {
  for (const OptimizerSpec& spec :
       {OptimizerSpec{"adamw", 1e-2f, 0.0f, 0.01f}, OptimizerSpec{"sgd", 0.05f, 0.9f, 1e-4f}}) {
    for (int n : {2, 3}) {
      const std::vector<float> plain = train(n, ShardMode::kNone, spec, 8);
      const std::vector<float> sharded = train(n, ShardMode::kOptimizer, spec, 8);
      // The sharded flat buffer may carry more zero padding at its end; the parameters match.
      ASSERT_GE(sharded.size(), plain.size());
      EXPECT_EQ(std::vector<float>(sharded.begin(), sharded.begin() + plain.size()), plain)
          << spec.kind << " on " << n << " devices";
    }
  }
}

TEST(ShardedOptimizer, EachReplicaHoldsItsShareOfTheOptimizerState) {
  // Big enough (63 K parameters) that the allocator's rounding and the optimizer's few scalars
  // are under 1% of its state.
  const ModelFactory bigger = mlp_factory({200, 300, 10});
  DataParallel plain(hosts(3), bigger, make_optimizer_factory({"adamw"}));
  DataParallel sharded(hosts(3), bigger, make_optimizer_factory({"adamw"}),
                       with_shard(ShardMode::kOptimizer));
  const DataParallel::StateBytes whole = plain.state_bytes(0);
  // AdamW: two moments per parameter.
  EXPECT_NEAR(whole.optimizer, 2 * whole.parameters, 0.01 * whole.optimizer);
  for (int r = 0; r < 3; ++r) {
    const DataParallel::StateBytes part = sharded.state_bytes(r);
    EXPECT_NEAR(3 * part.optimizer, whole.optimizer, 0.02 * whole.optimizer) << "replica " << r;
    EXPECT_EQ(part.gradients, part.parameters);  // stage 1 keeps whole gradients
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ShardedOptimizer, CheckpointsLoadAcrossModesAndDeviceCounts) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("lockstep-zero1-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const OptimizerSpec adamw{"adamw", 1e-2f, 0.0f, 0.01f};
  const std::vector<float> straight = train(2, ShardMode::kNone, adamw, 6);
  std::string saved;
  {  // 3 sharded steps on 2 devices, saved
    DataParallel dp(hosts(2), model(), make_optimizer_factory(adamw),
                    with_shard(ShardMode::kOptimizer));
    for (int s = 0; s < 3; ++s) dp.step(testing::random_batch(12, 20, 200 + s));
    saved = dp.save((dir / "a").string());
  }
  {  // ... resumed unsharded on 2 devices: bitwise the straight unsharded run
    DataParallel dp(hosts(2), model(), make_optimizer_factory(adamw));
    dp.load((dir / "a").string());
    for (int s = 3; s < 6; ++s) dp.step(testing::random_batch(12, 20, 200 + s));
    EXPECT_EQ(dp.parameters(0), straight);
  }
  {  // ... loaded sharded on 3 devices (other ranges) and saved again: the same whole tensors
    DataParallel dp(hosts(3), model(), make_optimizer_factory(adamw),
                    with_shard(ShardMode::kOptimizer));
    dp.load((dir / "a").string());
    const std::string again = dp.save((dir / "b").string());
    EXPECT_EQ(file_bytes(again + "/optimizer.safetensors"),
              file_bytes(saved + "/optimizer.safetensors"));
    EXPECT_EQ(file_bytes(again + "/model.safetensors"), file_bytes(saved + "/model.safetensors"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ls
