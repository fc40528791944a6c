// Small helpers shared by the benchmark files: the MLP the numbers are quoted for, a random
// batch, the flop count of a GEMM, the per-call time counter. Header-only; nothing here touches a
// device.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include <benchmark/benchmark.h>
#include <lockstep/data/sampler.h>

namespace ls::bench {

// The model every figure of docs/benchmarks.md is quoted for: 784-1024-1024-10.
inline std::vector<int64_t> mlp_widths(int64_t hidden) { return {784, hidden, hidden, 10}; }

// Normal(0, 1) features and uniform labels in 0..9, the same for the same size.
inline data::Batch random_batch(int64_t size, int64_t features) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  data::Batch batch;
  batch.size = size;
  batch.features = features;
  batch.images.reserve(static_cast<size_t>(size * features));
  for (int64_t i = 0; i < size * features; ++i) batch.images.push_back(normal(rng));
  for (int64_t i = 0; i < size; ++i) batch.labels.push_back(static_cast<int32_t>(rng() % 10));
  return batch;
}

// `size` sequences of `seq` random tokens below `vocab` (seed 1) with next-token labels.
inline data::Batch random_tokens(int64_t size, int64_t seq, int32_t vocab) {
  std::mt19937 rng(1);
  data::Batch b;
  b.size = size;
  b.features = seq;
  b.label_width = seq;
  for (int64_t i = 0; i < size * (seq + 1); ++i) {
    const int32_t t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    if (i % (seq + 1) != seq) b.tokens.push_back(t);
    if (i % (seq + 1) != 0) b.labels.push_back(t);
  }
  return b;
}

inline double gemm_flops(int64_t m, int64_t n, int64_t k) { return 2.0 * m * n * k; }

// The time of one call, for benchmarks whose iteration makes `calls` of them between two
// synchronizes (the CUDA ones enqueue 20): the Time column is per iteration, s_per_call is per
// call ("280u": 280 us).
inline void report_time_per_call(benchmark::State& state, int calls) {
  state.counters["s_per_call"] =
      benchmark::Counter(static_cast<double>(calls) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

}  // namespace ls::bench
