// Helpers the training tests share (host devices, a small GPT, an SGD that keeps rounding
// differences from growing, relative comparisons of parameters).
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/model/nn/transformer_config.h"
#include "parallel/data_parallel.h"

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
