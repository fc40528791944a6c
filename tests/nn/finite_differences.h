// A model's gradients against central finite differences, every parameter element: the tape's
// gradient (already in store.grads()) must match (loss(p + eps) - loss(p - eps)) / 2 eps within
// 2e-3 + 2e-2 |numeric|. loss_at_current_values() runs a forward pass with whatever values the
// store holds and returns the loss. Returns how many elements it checked.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "engine/model/nn/parameter_store.h"

namespace ls::test {

inline int64_t expect_gradients_match_finite_differences(
    nn::ParameterStore& store, Stream& stream,
    const std::function<double()>& loss_at_current_values, double eps = 1e-2) {
  const std::vector<float> grads = store.grads().to_host_f32(stream);
  std::vector<float> values = store.values_to_host(stream);
  int64_t checked = 0;
  for (Parameter* param : store.parameters()) {
    for (int64_t i = 0; i < param->numel(); ++i) {
      const size_t at = static_cast<size_t>(param->offset + i);
      const float saved = values[at];
      auto loss_at = [&](double delta) {
        values[at] = static_cast<float>(saved + delta);
        store.values().copy_from_host_async(values.data(), values.size() * 4, stream);
        return loss_at_current_values();
      };
      const double numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps);
      values[at] = saved;
      EXPECT_NEAR(grads[at], numeric, 2e-3 + 2e-2 * std::abs(numeric))
          << param->name << "[" << i << "]";
      ++checked;
    }
  }
  // Back to the original values; the copy reads `values`, so wait for it before it goes.
  store.values().copy_from_host_async(values.data(), values.size() * 4, stream);
  stream.synchronize();
  return checked;
}

}  // namespace ls::test
