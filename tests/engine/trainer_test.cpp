// Single-device training: no system allocation in the steady state, determinism, and the
// accuracy bar on the real Fashion-MNIST data (784-256-10 MLP, AdamW lr 1e-3, batch 128).
#include <filesystem>
#include <random>

#include <gtest/gtest.h>

#include "engine/data/dataset.h"
#include "engine/data/sampler.h"
#include "engine/runtime.h"
#include "engine/trainer.h"

namespace ls {
namespace {

constexpr const char* kDataDir = "/usr/share/datasets/fashion-mnist";

data::Batch random_batch(int64_t size, int64_t features, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  data::Batch batch;
  batch.size = size;
  for (int64_t i = 0; i < size * features; ++i) batch.images.push_back(normal(rng));
  for (int64_t i = 0; i < size; ++i) batch.labels.push_back(static_cast<int32_t>(rng() % 10));
  return batch;
}

TEST(Trainer, StepAllocatesNothingAfterWarmUp) {
  const Device device{DeviceKind::kHost, 5};  // a device of its own, so counters are ours
  Trainer trainer(nn::mlp({784, 256, 10}), OptimizerSpec{}, device, 1);
  const data::Batch batch = random_batch(64, 784, 3);
  for (int step = 1; step <= 2; ++step) trainer.step(batch);
  const AllocatorStats warm = device_runtime(device).allocator().stats();
  for (int step = 3; step <= 10; ++step) trainer.step(batch);
  const AllocatorStats after = device_runtime(device).allocator().stats();
  EXPECT_EQ(after.system_allocs, warm.system_allocs);
  EXPECT_GT(after.cache_hits, warm.cache_hits);
}

TEST(Trainer, SameSeedSameParametersBitwise) {
  const Device device{DeviceKind::kHost, 0};
  std::vector<std::vector<float>> finals;
  for (int run = 0; run < 2; ++run) {
    Trainer trainer(nn::mlp({20, 16, 10}), OptimizerSpec{"sgd", 0.1f, 0.9f, 1e-4f}, device, 9);
    for (int step = 0; step < 5; ++step) trainer.step(random_batch(8, 20, static_cast<uint32_t>(step)));
    finals.push_back(trainer.store().values_to_host(trainer.stream()));
  }
  EXPECT_EQ(finals[0], finals[1]);
}

TEST(Trainer, LossFallsOnAFixedBatch) {
  Trainer trainer(nn::mlp({20, 32, 10}), OptimizerSpec{"adamw", 1e-2f, 0.0f, 0.0f}, Device{DeviceKind::kHost, 0}, 2);
  const data::Batch batch = random_batch(16, 20, 4);
  const float first = trainer.step(batch).loss;
  float last = first;
  for (int step = 0; step < 50; ++step) last = trainer.step(batch).loss;
  EXPECT_LT(last, 0.2f * first);  // memorises 16 examples
}

TEST(Trainer, FashionMnistMlpReachesAccuracyBarIn3Epochs) {
  if (!std::filesystem::exists(kDataDir)) GTEST_SKIP() << kDataDir << " missing (scripts/setup installs it)";
  data::Dataset train = data::load_fashion_mnist(kDataDir, data::Split::kTrain);
  data::Dataset test = data::load_fashion_mnist(kDataDir, data::Split::kTest);
  Trainer trainer(nn::mlp({784, 256, 10}), OptimizerSpec{"adamw", 1e-3f, 0.0f, 0.01f},
                  Device{DeviceKind::kHost, 0}, 1);
  data::Sampler sampler(train.count, 1);
  data::BatchIterator batches(train, sampler, 128);
  data::Batch batch;
  for (int epoch = 0; epoch < 3; ++epoch) {
    sampler.set_epoch(epoch);
    batches.reset();
    while (batches.next(batch)) trainer.step(batch);
  }
  const EvalResult result = trainer.evaluate(test, 1000);
  EXPECT_EQ(result.examples, 10000);
  EXPECT_GE(result.accuracy, 0.85) << "test loss " << result.loss;
}

}  // namespace
}  // namespace ls
