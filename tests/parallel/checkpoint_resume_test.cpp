// DataParallel::save/load: a resumed run is bitwise the uninterrupted run, a crash during a
// commit leaves the previous checkpoint loadable, and checkpoints of another model or optimizer
// are refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "checkpoint/checkpoint_test_util.h"
#include <lockstep/error.h>
#include "engine/model/checkpoint/checkpoint.h"
#include <lockstep/data/sampler.h>
#include <lockstep/data_parallel.h>

namespace ls {
namespace {

namespace fs = std::filesystem;

// A small synthetic data set, walked by the real sampler and batch iterator.
data::Dataset synthetic(int64_t count, int64_t features) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal;
  data::Dataset ds;
  ds.name = "synthetic";
  ds.count = count;
  ds.features = features;
  ds.classes = 10;
  for (int64_t i = 0; i < count * features; ++i) ds.images.push_back(normal(rng));
  for (int64_t i = 0; i < count; ++i) ds.labels.push_back(static_cast<int32_t>(rng() % 10));
  return ds;
}

class CheckpointResume : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep-ckpt-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<DataParallel> make(int devices, std::vector<int64_t> widths = {12, 16, 10}) {
    return std::make_unique<DataParallel>(parse_devices("host:" + std::to_string(devices)),
                                          mlp_factory(widths), make_optimizer_factory({}));
  }

  // Trains steps [first, last) continuing from `position`; returns where the data stands.
  TrainingPosition train(DataParallel& dp, TrainingPosition position, int64_t steps) {
    data::Sampler sampler(data_.count, 7);
    sampler.set_epoch(position.epoch);
    data::BatchIterator batches(data_, sampler, 8);
    batches.seek(position.epoch, position.batch_index);
    data::Batch batch;
    for (int64_t s = 0; s < steps; ++s) {
      if (!batches.next(batch)) {
        sampler.set_epoch(sampler.epoch() + 1);
        batches.reset();
        batches.next(batch);
      }
      dp.step(batch);
    }
    return {sampler.epoch(), batches.position()};
  }

  fs::path dir_;
  data::Dataset data_ = synthetic(60, 12);  // 7 batches of 8 per epoch: runs cross epochs
};

TEST_F(CheckpointResume, ResumedRunIsBitwiseTheUninterruptedRun) {
  auto straight = make(2);
  train(*straight, {}, 40);

  auto first = make(2);
  const TrainingPosition at20 = train(*first, {}, 20);
  first->save(dir_.string(), at20);
  first.reset();  // "the process died"

  auto resumed = make(2);
  const TrainingPosition position = resumed->load(dir_.string());
  EXPECT_EQ(position.epoch, at20.epoch);
  EXPECT_EQ(position.batch_index, at20.batch_index);
  EXPECT_EQ(resumed->steps_taken(), 20);
  train(*resumed, position, 20);
  EXPECT_EQ(resumed->parameters(0), straight->parameters(0));
  EXPECT_EQ(resumed->parameters(1), straight->parameters(0));
}

TEST_F(CheckpointResume, CheckpointOfOneDeviceCountLoadsOnAnother) {
  auto two = make(2);
  train(*two, {}, 5);
  two->save(dir_.string());
  auto three = make(3);
  three->load(dir_.string());
  EXPECT_EQ(three->parameters(2), two->parameters(0));
}

TEST_F(CheckpointResume, CrashDuringCommitLeavesThePreviousCheckpoint) {
  auto dp = make(2);
  train(*dp, {}, 3);
  const std::string first = dp->save(dir_.string(), {0, 3});
  const std::vector<float> saved = dp->parameters(0);
  train(*dp, {0, 3}, 2);
  for (auto point :
       {checkpoint::CrashPoint::kAfterModelFile, checkpoint::CrashPoint::kAfterTempDir,
        checkpoint::CrashPoint::kAfterRename, checkpoint::CrashPoint::kAfterLatestTemp}) {
    checkpoint::set_checkpoint_crash_point_for_testing(point);
    EXPECT_THROW(dp->save(dir_.string(), {0, 5}), checkpoint::SimulatedCrash);
    auto fresh = make(2);
    const TrainingPosition position = fresh->load(dir_.string());
    EXPECT_EQ(fresh->parameters(0), saved) << "crash point " << static_cast<int>(point);
    EXPECT_EQ(position.batch_index, 3);
  }
}

TEST_F(CheckpointResume, SaveKeepsWhatTheRetentionSays) {
  auto dp = make(2);
  auto step_dirs = [&] { return checkpoint::testing::step_dir_names(dir_); };
  for (int s = 1; s <= 5; ++s) {
    train(*dp, {}, 1);
    dp->save(dir_.string());  // default: the newest 3
  }
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-000003", "step-000004", "step-000005"}));
  train(*dp, {}, 1);
  dp->save(dir_.string(), {}, {.keep_last = 1, .keep_every = 4});
  EXPECT_EQ(step_dirs(), (std::vector<std::string>{"step-000004", "step-000006"}));
  auto fresh = make(2);
  fresh->load(dir_.string());
  EXPECT_EQ(fresh->parameters(1), dp->parameters(0));
}

TEST_F(CheckpointResume, AnotherModelIsRefused) {
  auto dp = make(1);
  dp->save(dir_.string());
  auto wider = make(1, {12, 32, 10});
  try {
    wider->load(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("different model"), std::string::npos) << e.what();
  }
  DataParallel sgd(parse_devices("host:1"), mlp_factory({12, 16, 10}),
                   make_optimizer_factory({"sgd", 0.1f, 0.9f, 0.0f}));
  try {
    sgd.load(dir_.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("optimizer 'adamw'"), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointResume, MissingCheckpointIsAClearError) {
  auto dp = make(1);
  EXPECT_THROW(dp->load((dir_ / "nothing-here").string()), Error);
}

}  // namespace
}  // namespace ls
