// A seeded batch of normal-distributed features and labels in [0, 10), for the data-parallel
// tests that need data but not Fashion-MNIST.
#pragma once

#include <cstdint>
#include <random>

#include <lockstep/data/sampler.h>

namespace ls::testing {

inline data::Batch random_batch(int64_t size, int64_t features, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  data::Batch batch;
  batch.size = size;
  batch.features = features;
  for (int64_t i = 0; i < size * features; ++i) batch.images.push_back(normal(rng));
  for (int64_t i = 0; i < size; ++i) batch.labels.push_back(static_cast<int32_t>(rng() % 10));
  return batch;
}

}  // namespace ls::testing
