// Training through DataParallel on host devices: one device and several, equivalence of N
// replicas with one replica on the same global batch, gradient accumulation, uneven shards,
// determinism, overlap of the gradient all-reduce with backward, no steady-state allocation,
// and the accuracy bar on the real Fashion-MNIST data.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/data/dataset.h>
#include <lockstep/data/sampler.h>
#include <lockstep/data_parallel.h>
#include "parallel/random_batch.h"

namespace ls {
namespace {

constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";

std::vector<Device> hosts(int n) { return parse_devices("host:" + std::to_string(n)); }

using testing::random_batch;

// Parameters after `steps` SGD steps on seeded random batches of `global` rows.
std::vector<float> train_sgd(int devices, int steps, int64_t global,
                             DataParallelOptions options = {}) {
  DataParallel dp(hosts(devices), mlp_factory({20, 32, 16, 10}),
                  make_optimizer_factory({"sgd", 0.05f, 0.9f, 1e-4f}), options);
  for (int s = 0; s < steps; ++s) dp.step(random_batch(global, 20, static_cast<uint32_t>(100 + s)));
  return dp.parameters(0);
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double scale = std::max(1e-3, static_cast<double>(std::abs(a[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

TEST(DataParallel, TwoAndFourReplicasMatchOneReplicaOnTheSameGlobalBatch) {
  const std::vector<float> one = train_sgd(1, 20, 48);
  EXPECT_LT(max_relative_difference(one, train_sgd(2, 20, 48)), 1e-5);
  EXPECT_LT(max_relative_difference(one, train_sgd(4, 20, 48)), 1e-5);
}

TEST(DataParallel, SameDeviceCountIsBitwiseReproducible) {
  EXPECT_EQ(train_sgd(3, 10, 48), train_sgd(3, 10, 48));
}

TEST(DataParallel, ReplicasStayBitwiseEqual) {
  DataParallel dp(hosts(3), mlp_factory({20, 16, 10}), make_optimizer_factory({}));
  for (int s = 0; s < 5; ++s) dp.step(random_batch(30, 20, static_cast<uint32_t>(s)));
  EXPECT_EQ(dp.parameters(0), dp.parameters(1));
  EXPECT_EQ(dp.parameters(0), dp.parameters(2));
}

TEST(DataParallel, GradientAccumulationMatchesOneBigBatch) {
  DataParallelOptions accumulate;
  accumulate.accumulate = 4;
  const std::vector<float> big = train_sgd(2, 10, 64);
  EXPECT_LT(max_relative_difference(big, train_sgd(2, 10, 64, accumulate)), 1e-5);
}

TEST(DataParallel, UnevenShardsMatchOneBigBatchWhenAllowed) {
  DataParallelOptions uneven;
  uneven.allow_uneven_shards = true;
  EXPECT_LT(max_relative_difference(train_sgd(1, 10, 50), train_sgd(3, 10, 50, uneven)), 1e-5);
}

TEST(DataParallel, UnevenShardsAreAnErrorByDefault) {
  DataParallel dp(hosts(3), mlp_factory({20, 10}), make_optimizer_factory({}));
  try {
    dp.step(random_batch(50, 20, 1));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not divide by the 3 devices"), std::string::npos);
  }
  dp.step(random_batch(51, 20, 1));  // still usable: the check runs before any replica works
}

TEST(DataParallel, SmallBucketsGiveTheSameResult) {
  DataParallelOptions tiny;
  tiny.buckets = {1024, 256};  // five buckets
  const std::vector<float> reference = train_sgd(2, 5, 32);
  DataParallel dp(hosts(2), mlp_factory({20, 32, 16, 10}),
                  make_optimizer_factory({"sgd", 0.05f, 0.9f, 1e-4f}), tiny);
  EXPECT_GT(dp.buckets().size(), 3u);
  for (int s = 0; s < 5; ++s) dp.step(random_batch(32, 20, static_cast<uint32_t>(100 + s)));
  EXPECT_EQ(dp.parameters(0), reference);  // same sums in the same order: bitwise
}

TEST(DataParallel, FirstBucketAllReduceStartsBeforeBackwardEnds) {
  DataParallelOptions options;
  // The head (10240 + 64 floats) alone in bucket 0, so three layers of backward remain after it
  // is ready: on a loaded 2-core machine the comm thread may wait a few ms for a core.
  options.buckets = {1 << 20, 42 << 10};
  DataParallel dp(hosts(2), mlp_factory({784, 1024, 1024, 1024, 10}), make_optimizer_factory({}),
                  options);
  ASSERT_GE(dp.buckets().size(), 3u);
  ASSERT_EQ(dp.buckets()[0].parameters, (std::vector<int>{7, 6}));
  const data::Batch batch = random_batch(128, 784, 5);
  for (int s = 0; s < 3; ++s) {
    dp.step(batch);
    const BucketTimeline t = dp.last_timeline(0);
    EXPECT_LT(t.bucket_start_ms[0], t.backward_end_ms)
        << "step " << s << ": bucket 0 ran " << t.bucket_start_ms[0] << ".." << t.bucket_end_ms[0]
        << " ms, bucket 1 " << t.bucket_start_ms[1] << ".." << t.bucket_end_ms[1]
        << ", backward ended at " << t.backward_end_ms;
    for (size_t b = 1; b < t.bucket_start_ms.size(); ++b) {
      EXPECT_GE(t.bucket_start_ms[b], t.bucket_end_ms[b - 1]);  // in order on the comm stream
    }
  }
}

// Eager steps: after two; graphs: after the capture (step 3), whose memory is the graph's own.
TEST(DataParallel, StepAllocatesNothingAfterWarmUp) {
  const std::vector<Device> devices{{DeviceKind::kHost, 6}, {DeviceKind::kHost, 7}};
  for (const bool graphs : {false, true}) {
    DataParallelOptions options;
    options.graphs = graphs;
    DataParallel dp(devices, mlp_factory({784, 256, 10}), make_optimizer_factory({}), options);
    const data::Batch batch = random_batch(64, 784, 3);
    const int warm_steps = graphs ? 3 : 2;
    for (int s = 1; s <= warm_steps; ++s) dp.step(batch);
    const AllocatorStats warm0 = dp.allocator_stats(0), warm1 = dp.allocator_stats(1);
    for (int s = warm_steps + 1; s <= 10; ++s) dp.step(batch);
    EXPECT_EQ(dp.allocator_stats(0).system_allocs, warm0.system_allocs) << "graphs " << graphs;
    EXPECT_EQ(dp.allocator_stats(1).system_allocs, warm1.system_allocs) << "graphs " << graphs;
    EXPECT_EQ(dp.graph_launches(), graphs ? 8 : 0);
  }
}

TEST(DataParallel, LossFallsOnAFixedBatch) {
  DataParallel dp(hosts(2), mlp_factory({20, 32, 10}),
                  make_optimizer_factory({"adamw", 1e-2f, 0, 0}));
  const data::Batch batch = random_batch(16, 20, 4);
  const float first = dp.step(batch).loss;
  float last = first;
  for (int s = 0; s < 50; ++s) last = dp.step(batch).loss;
  EXPECT_LT(last, 0.2f * first);
}

TEST(DataParallel, ReplicaFailureNamesReplicaStepAndPhase) {
  DataParallel dp(hosts(2), mlp_factory({20, 10}), make_optimizer_factory({}));
  data::Batch batch = random_batch(8, 20, 1);
  dp.step(batch);
  batch.labels[6] = 12;  // out of range, in replica 1's shard
  try {
    dp.step(batch);
    FAIL() << "a bad label did not fail the step";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("replica 1 on host:1"), std::string::npos) << what;
    EXPECT_NE(what.find("step 2"), std::string::npos) << what;
    EXPECT_NE(what.find("label"), std::string::npos) << what;
  }
  EXPECT_THROW(dp.step(random_batch(8, 20, 1)), Error);  // unusable after a failure
}

TEST(DataParallel, FashionMnistMlpReachesAccuracyBarIn3Epochs) {
  if (!std::filesystem::exists(kDataDir))
    GTEST_SKIP() << kDataDir << " missing (scripts/setup installs it)";
  data::Dataset train = data::load_fashion_mnist(kDataDir, data::Split::kTrain);
  data::Dataset test = data::load_fashion_mnist(kDataDir, data::Split::kTest);
  DataParallel dp(hosts(1), mlp_factory({784, 256, 10}),
                  make_optimizer_factory({"adamw", 1e-3f, 0.0f, 0.01f}));
  data::Sampler sampler(train.count, 1);
  data::BatchIterator batches(train, sampler, 128);
  data::Batch batch;
  for (int epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    batches.reset();
    while (batches.next(batch)) dp.step(batch);
  }
  const EvalResult result = dp.evaluate(test, 1000);
  EXPECT_EQ(result.examples, 10000);
  EXPECT_GE(result.accuracy, 0.85) << "test loss " << result.loss;
}

}  // namespace
}  // namespace ls
