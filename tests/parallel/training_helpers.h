// Helpers the training tests share (host devices, a small GPT, an SGD that keeps rounding
// differences from growing, relative comparisons of parameters).
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <lockstep/transformer_config.h>
#include "ops/softmax_xent.h"
#include <lockstep/data_parallel.h>

namespace ls::testing {

inline std::vector<Device> hosts(int n) { return parse_devices("host:" + std::to_string(n)); }

// SGD with momentum: unlike AdamW (g / sqrt(v) turns last-bit differences of near-zero gradients
// into lr-sized steps), it keeps runs that sum in different orders comparable.
inline OptimizerFactory momentum_sgd() { return make_optimizer_factory({"sgd", 0.05f, 0.9f, 1e-4f}); }

// GPT layout, 2 layers, 2 heads, hidden 16, ffn 24, sequences of 8 over a vocabulary of 20 with
// token 0 as padding.
inline nn::TransformerConfig tiny_gpt_config() {
  nn::TransformerConfig c = nn::gpt_config(2, 2, 16, 8, 20);
  c.ffn = 24;
  c.pad_id = 0;
  return c;
}

// Language-model batches for the tiny GPT: `size` sequences of 8 tokens from 1..19 (0 pads),
// labelled with the next token (the last position's and padding's ignored). kRandom: random
// tokens and random lengths 2..8, so the counted labels change from batch to batch. kCounting:
// full sequences where each token is the previous one plus one (mod 19), a rule a model learns.
enum class Sequences { kRandom, kCounting };
inline data::Batch lm_batch(int64_t size, uint32_t seed, Sequences kind = Sequences::kRandom) {
  constexpr int64_t kSeq = 8;
  std::mt19937 rng(seed);
  data::Batch b;
  b.size = size;
  b.features = kSeq;
  b.label_width = kSeq;
  for (int64_t r = 0; r < size; ++r) {
    const bool counting = kind == Sequences::kCounting;
    const int64_t length = counting ? kSeq : 2 + static_cast<int64_t>(rng() % (kSeq - 1));
    int32_t token = 1 + static_cast<int32_t>(rng() % 19);
    for (int64_t t = 0; t < kSeq; ++t) {
      b.tokens.push_back(t < length ? token : 0);
      token = counting ? 1 + token % 19 : 1 + static_cast<int32_t>(rng() % 19);
    }
    for (int64_t t = 0; t < kSeq; ++t) {
      b.labels.push_back(t + 1 < length ? b.tokens[static_cast<size_t>(r * kSeq + t + 1)]
                                        : kIgnoreLabel);
    }
  }
  return b;
}

// The largest |a - b| / max(|a|, 1e-3) over the elements both have.
inline double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double scale = std::max(1e-3, static_cast<double>(std::abs(a[i])));
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

// The same over named parameters, which must have the same names in the same order.
inline double max_relative_difference(const std::vector<DataParallel::NamedParameter>& a,
                                      const std::vector<DataParallel::NamedParameter>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].values.size() != b[i].values.size()) return INFINITY;
    worst = std::max(worst, max_relative_difference(a[i].values, b[i].values));
  }
  return worst;
}

}  // namespace ls::testing
