// The fixture of the commit_checkpoint tests: a model and optimizer state derived from a step
// number (State), a check that a loaded checkpoint holds one (expect_state), and a test class
// with a temporary checkpoint directory and helpers to inspect it (CheckpointTest).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "engine/model/checkpoint/checkpoint.h"

namespace ls::checkpoint::testing {

using D = SafetensorsDType;

// A model and optimizer state derived from `step`, so each commit's content is distinct.
struct State {
  explicit State(int64_t step, size_t n = 300) : weight(n), exp_avg(n), exp_avg_sq(n) {
    for (size_t i = 0; i < n; ++i) {
      weight[i] = static_cast<float>(step) + static_cast<float>(i) * 0.25f;
      exp_avg[i] = -static_cast<float>(i) / static_cast<float>(step + 1);
      exp_avg_sq[i] = static_cast<float>(i * i);
    }
    meta.step = step;
    meta.seed = 0xfedcba9876543210ull;  // above INT64_MAX: must survive exactly
    meta.epoch = step / 10;
    meta.batch_index = step % 10;
    meta.model = "mlp 784-256-10";
    meta.optimizer = "adamw";
    meta.optimizer_steps = step;
    meta.extra = {{"lr", "0.001"}, {"note", "quote \" and \xc3\xa9"}};
  }
  std::vector<NamedHostTensor> model() const {
    return {{"params", D::kF32, {static_cast<int64_t>(weight.size())}, bytes_of(weight)}};
  }
  std::vector<NamedHostTensor> optimizer() const {
    const int64_t n = static_cast<int64_t>(exp_avg.size());
    return {{"exp_avg", D::kF32, {n}, bytes_of(exp_avg)},
            {"exp_avg_sq", D::kF32, {n}, bytes_of(exp_avg_sq)}};
  }
  std::vector<float> weight, exp_avg, exp_avg_sq;
  CheckpointMeta meta;
};

inline void expect_state(const LoadedCheckpoint& got, const State& want) {
  EXPECT_EQ(got.meta, want.meta);
  auto same = [](const SafetensorsTensor& t, const std::vector<float>& v) {
    const auto b = bytes_of(v);
    return std::equal(t.data.begin(), t.data.end(), b.begin(), b.end());
  };
  EXPECT_TRUE(same(got.model.at("params"), want.weight));
  EXPECT_TRUE(same(got.optimizer.at("exp_avg"), want.exp_avg));
  EXPECT_TRUE(same(got.optimizer.at("exp_avg_sq"), want.exp_avg_sq));
}

class CheckpointTest : public TempDirTest {
 protected:
  void TearDown() override {
    set_checkpoint_crash_point_for_testing(CrashPoint::kNone);
    set_free_disk_bytes_for_testing(std::nullopt);
    TempDirTest::TearDown();
  }
  std::string commit(const State& s, const CheckpointRetention& retention = {}) {
    return commit_checkpoint(dir_.string(), s.meta, s.model(), s.optimizer(), retention);
  }
  // The step directories in DIR, by name.
  std::vector<std::string> step_names() const { return step_dir_names(dir_); }
  std::string latest_text() const {
    const Bytes b = read_all(dir_ / "latest");
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  // Names in DIR that start with '.': temporaries left behind.
  std::vector<std::string> hidden_entries() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().filename().string().starts_with("."))
        out.push_back(e.path().filename().string());
    }
    return out;
  }
  std::string step_dir(int64_t step) const { return (dir_ / checkpoint_step_name(step)).string(); }
};

}  // namespace ls::checkpoint::testing
