// Tests for commit_checkpoint / load_checkpoint / latest_checkpoint: round trips, the on-disk
// layout and meta.json, repeated and replacing commits, corruption (checksum, size, missing
// files, a dangling or garbage `latest`, strict meta.json), and a simulated crash at every crash
// point, after which the previous checkpoint must load and the new one be absent or complete.
#include "engine/model/checkpoint/checkpoint.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "checkpoint/checkpoint_fixture.h"
#include "engine/core/json_reader.h"
#include "engine/model/checkpoint/atomic_file.h"

namespace ls::checkpoint {
namespace {

using namespace testing;  // NOLINT: the checkpoint test helpers

TEST_F(CheckpointTest, CommitThenLoadRoundTrips) {
  const State s(40);
  const std::string path = commit(s);
  EXPECT_EQ(path, step_dir(40));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "step-000040" / "model.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "step-000040" / "optimizer.safetensors"));
  EXPECT_TRUE(fs::is_regular_file(dir_ / "step-000040" / "meta.json"));
  EXPECT_EQ(latest_text(), "step-000040\n");
  EXPECT_EQ(latest_checkpoint(dir_.string()), path);
  EXPECT_TRUE(hidden_entries().empty());

  const LoadedCheckpoint by_dir = load_checkpoint(dir_.string());
  EXPECT_EQ(by_dir.path, path);
  expect_state(by_dir, s);
  expect_state(load_checkpoint(path), s);  // a step directory directly
  EXPECT_EQ(by_dir.model.metadata().at("format"), "pt");
}

TEST_F(CheckpointTest, MetaJsonRecordsFormatSizesAndChecksums) {
  commit(State(7));
  const fs::path step = dir_ / "step-000007";
  const Bytes text = read_all(step / "meta.json");
  const JsonValue meta =
      parse_json(std::string_view(reinterpret_cast<const char*>(text.data()), text.size()), "m");
  EXPECT_EQ(meta.find("format")->as_string(), "lockstep-checkpoint");
  EXPECT_EQ(meta.find("format_version")->as_int64(), kCheckpointFormatVersion);
  EXPECT_EQ(meta.find("step")->as_int64(), 7);
  EXPECT_EQ(meta.find("seed")->as_string(), "18364758544493064720");
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    const JsonValue* rec = meta.find("files")->find(name);
    ASSERT_NE(rec, nullptr) << name;
    EXPECT_EQ(rec->find("bytes")->as_uint64(), fs::file_size(step / name));
    EXPECT_EQ(rec->find("crc32")->as_uint64(), crc32_of_file((step / name).string()));
  }
}

TEST_F(CheckpointTest, RepeatedCommitsMoveLatest) {
  for (int64_t step : {10, 20, 30}) {
    commit(State(step));
    EXPECT_EQ(latest_text(), checkpoint_step_name(step) + "\n");
    EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, step);
  }
  for (int64_t step : {10, 20}) expect_state(load_checkpoint(step_dir(step)), State(step));
  commit(State(1234567));  // more than six digits
  EXPECT_EQ(latest_text(), "step-1234567\n");
  EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, 1234567);
  EXPECT_TRUE(hidden_entries().empty());
}

TEST_F(CheckpointTest, RecommittingTheLatestStepReplacesIt) {
  commit(State(10));
  State again(10);
  again.weight[0] = 99.0f;
  again.meta.extra["run"] = "second";
  commit(again);
  expect_state(load_checkpoint(dir_.string()), again);
  EXPECT_EQ(latest_text(), "step-000010\n");
  EXPECT_TRUE(hidden_entries().empty());
}

TEST_F(CheckpointTest, RecommittingAnOlderStepReplacesItAndMovesLatest) {
  commit(State(10));
  commit(State(20));
  State redo(10, 50);
  commit(redo);
  EXPECT_EQ(latest_text(), "step-000010\n");
  expect_state(load_checkpoint(dir_.string()), redo);
}

TEST_F(CheckpointTest, ChecksumMismatchNamesTheFile) {
  for (const char* name : {"model.safetensors", "optimizer.safetensors"}) {
    for (bool in_header : {false, true}) {
      SCOPED_TRACE(std::string(name) + (in_header ? " header" : " data"));
      commit(State(5));
      const fs::path file = dir_ / "step-000005" / name;
      Bytes bytes = read_all(file);
      const size_t at = in_header ? 20 : bytes.size() - 3;
      bytes[at] ^= std::byte{0x01};
      write_all(file, bytes);
      EXPECT_THROW_WITH(load_checkpoint(dir_.string()), file.string(), "checksum mismatch");
    }
  }
}

TEST_F(CheckpointTest, SizeMismatchAndMissingFiles) {
  commit(State(5));
  const fs::path step = dir_ / "step-000005";
  Bytes bytes = read_all(step / "model.safetensors");
  bytes.push_back(std::byte{0});
  write_all(step / "model.safetensors", bytes);
  EXPECT_THROW_WITH(load_checkpoint(dir_.string()), "model.safetensors", "size mismatch");

  commit(State(6));
  fs::remove(dir_ / "step-000006" / "optimizer.safetensors");
  EXPECT_THROW_WITH(load_checkpoint(dir_.string()), "optimizer.safetensors", "missing",
                    "incomplete");

  commit(State(7));
  fs::remove(dir_ / "step-000007" / "meta.json");
  EXPECT_THROW_WITH(load_checkpoint(dir_.string()), "meta.json", "cannot open");
  EXPECT_THROW_WITH(load_checkpoint(step_dir(7)), "no checkpoint at", "step-000007");
}

TEST_F(CheckpointTest, LatestPointingNowhereOrGarbage) {
  EXPECT_EQ(latest_checkpoint(dir_.string()), std::nullopt);
  EXPECT_EQ(latest_checkpoint((dir_ / "does-not-exist").string()), std::nullopt);
  EXPECT_THROW_WITH(load_checkpoint(dir_.string()), "no checkpoint at", "neither meta.json");

  commit(State(3));
  write_all(dir_ / "latest", to_bytes("step-000099\n"));
  EXPECT_THROW_WITH(latest_checkpoint(dir_.string()), "latest", "step-000099", "does not exist");
  EXPECT_THROW_WITH(load_checkpoint(dir_.string()), "does not exist");
  for (const char* garbage : {"../../etc\n", "", "step-\n", "step-12/../x", "step-000003\n\n"}) {
    SCOPED_TRACE(garbage);
    write_all(dir_ / "latest", to_bytes(garbage));
    EXPECT_THROW_WITH(latest_checkpoint(dir_.string()), "latest", "expected a checkpoint name");
  }
  write_all(dir_ / "latest", to_bytes("step-000003"));  // the newline is optional
  EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, 3);
}

// Rewrites meta.json of step 5 with `edit` applied to its text.
class MetaJsonTest : public CheckpointTest {
 protected:
  void edit_meta(const std::string& from, const std::string& to) {
    const fs::path path = dir_ / "step-000005" / "meta.json";
    const Bytes b = read_all(path);
    std::string text(reinterpret_cast<const char*>(b.data()), b.size());
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in " << text;
    text.replace(at, from.size(), to);
    write_all(path, to_bytes(text));
  }
};

TEST_F(MetaJsonTest, StrictParsing) {
  struct Case {
    std::string from, to;
    std::vector<std::string> fragments;
  };
  const std::vector<Case> cases = {
      {"\"format_version\": 1",
       "\"format_version\": 2",
       {"unknown format version 2", "reads version 1"}},
      {"\"format\": \"lockstep-checkpoint\"",
       "\"format\": \"other\"",
       {"not a lockstep checkpoint"}},
      {"\"epoch\": 0", "\"epoch\": 0, \"surprise\": 1", {"unknown field 'surprise'"}},
      {"\"epoch\": 0, ", "", {"missing field 'epoch'"}},
      {"\"epoch\": 0", "\"epoch\": \"0\"", {"field 'epoch' must be a number, got a string"}},
      {"\"epoch\": 0", "\"epoch\": 0.5", {"field 'epoch'", "integer"}},
      {"\"step\": 5", "\"step\": 6", {"step 6 does not match its directory name 'step-000005'"}},
      {"\"seed\": \"", "\"seed\": \"x", {"field 'seed' must be a decimal"}},
      {"\"lr\": \"0.001\"", "\"lr\": 0.001", {"extra 'lr' must be a string"}},
      {"\"crc32\": ", "\"crc32\": 1, \"crc32\": ", {"duplicate key \"crc32\"", "meta.json"}},
      {"\"model.safetensors\": {",
       "\"other.bin\": {}, \"model.safetensors\": {",
       {"unknown field 'other.bin'"}},
      {"{", "[", {"meta.json: byte"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.to);
    fs::remove_all(dir_ / "step-000005");
    commit(State(5));
    edit_meta(c.from, c.to);
    const std::string message = error_of([&] { load_checkpoint(dir_.string()); });
    EXPECT_TRUE(contains_all(message, {"meta.json"}));
    for (const std::string& f : c.fragments) EXPECT_TRUE(contains_all(message, {f}));
  }
}

TEST_F(CheckpointTest, RefusesBadMetaBeforeWritingAnything) {
  commit(State(1));
  State bad(2);
  bad.meta.model = "not utf-8 \xff";
  EXPECT_THROW_WITH(commit(bad), "would not load back", "UTF-8");
  State negative(3);
  negative.meta.step = -3;
  EXPECT_THROW_WITH(commit(negative), "step -3 is negative");
  State bad_tensor(5);
  const std::vector<float> three(3);
  EXPECT_THROW_WITH(commit_checkpoint(dir_.string(), bad_tensor.meta, bad_tensor.model(),
                                      {{"exp_avg", D::kF32, {4}, bytes_of(three)}}),
                    "'exp_avg'", "needs 16 bytes");
  EXPECT_TRUE(hidden_entries().empty());  // the failed commit removed its temp directory
  EXPECT_EQ(latest_text(), "step-000001\n");
  EXPECT_FALSE(fs::exists(dir_ / "step-000002"));
  EXPECT_FALSE(fs::exists(dir_ / "step-000005"));
  commit(State(4));
  EXPECT_TRUE(hidden_entries().empty());
  // A fresh nested DIR (with a trailing slash) is created.
  const State s(8);
  EXPECT_EQ(commit_checkpoint((dir_ / "a" / "b/").string(), s.meta, s.model(), s.optimizer()),
            (dir_ / "a" / "b" / "step-000008").string());
  EXPECT_EQ(load_checkpoint((dir_ / "a" / "b").string()).meta.step, 8);
}

// Note [Checkpoint commit protocol] (engine/model/checkpoint/checkpoint.cpp): a crash at any point
// before `latest` is renamed leaves the previous checkpoint current and loadable.
class CrashTest : public CheckpointTest, public ::testing::WithParamInterface<CrashPoint> {};

TEST_P(CrashTest, PreviousCheckpointSurvivesAndRecoveryCommitWorks) {
  const State before(10), after(20);
  commit(before);
  set_checkpoint_crash_point_for_testing(GetParam());
  EXPECT_THROW(commit(after), SimulatedCrash);

  // The previous checkpoint is still the current one, and complete.
  EXPECT_EQ(latest_text(), "step-000010\n");
  expect_state(load_checkpoint(dir_.string()), before);
  // The new one is absent, or complete.
  if (fs::exists(step_dir(20))) expect_state(load_checkpoint(step_dir(20)), after);
  EXPECT_EQ(fs::exists(step_dir(20)), GetParam() == CrashPoint::kAfterRename ||
                                          GetParam() == CrashPoint::kAfterLatestTemp);

  // The restarted run commits again: temporaries are cleaned up, `latest` moves.
  commit(after);
  EXPECT_EQ(latest_text(), "step-000020\n");
  expect_state(load_checkpoint(dir_.string()), after);
  EXPECT_TRUE(hidden_entries().empty());
  // A crash point fires once.
  commit(State(30));
  EXPECT_EQ(latest_text(), "step-000030\n");
}

TEST_P(CrashTest, RestartResumingFromThePreviousCheckpointRecommitsTheSameStep) {
  // The realistic sequence: crash while committing 20, restart from 10, train, commit 20 again
  // (possibly over an orphaned step-000020 from the crash), then 30.
  commit(State(10));
  set_checkpoint_crash_point_for_testing(GetParam());
  EXPECT_THROW(commit(State(20)), SimulatedCrash);
  EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, 10);
  State redone(20, 100);
  commit(redone);
  expect_state(load_checkpoint(dir_.string()), redone);
  commit(State(30));
  EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, 30);
  EXPECT_TRUE(hidden_entries().empty());
}

TEST_P(CrashTest, CrashOnTheFirstCommitLeavesNoCheckpoint) {
  set_checkpoint_crash_point_for_testing(GetParam());
  EXPECT_THROW(commit(State(10)), SimulatedCrash);
  EXPECT_EQ(latest_checkpoint(dir_.string()), std::nullopt);
  commit(State(10));
  EXPECT_EQ(load_checkpoint(dir_.string()).meta.step, 10);
}

INSTANTIATE_TEST_SUITE_P(AllPoints, CrashTest,
                         ::testing::Values(CrashPoint::kAfterModelFile, CrashPoint::kAfterTempDir,
                                           CrashPoint::kAfterRename, CrashPoint::kAfterLatestTemp),
                         [](const ::testing::TestParamInfo<CrashPoint>& info) {
                           switch (info.param) {
                             case CrashPoint::kAfterModelFile: return "AfterModelFile";
                             case CrashPoint::kAfterTempDir: return "AfterTempDir";
                             case CrashPoint::kAfterRename: return "AfterRename";
                             case CrashPoint::kAfterLatestTemp: return "AfterLatestTemp";
                             default: return "None";
                           }
                         });

TEST_F(CheckpointTest, AtomicFileHelpers) {
  const fs::path path = dir_ / "f.bin";
  write_file_atomic(path.string(), std::string_view("hello"));
  write_file_atomic(path.string(), std::string_view("hello, world"));
  EXPECT_EQ(read_all(path), to_bytes("hello, world"));
  EXPECT_EQ(crc32_of_file(path.string()), 0xffab723au);  // zlib.crc32(b"hello, world")
  EXPECT_EQ(crc32_of(to_bytes("123456789")), 0xcbf43926u);  // the CRC-32 check value
  EXPECT_EQ(read_file_bytes(path.string(), 12), to_bytes("hello, world"));
  EXPECT_THROW_WITH(read_file_bytes(path.string(), 11), "more than the limit of 11");
  {
    AtomicFileWriter abandoned(path.string());
    abandoned.append(to_bytes("partial"));
  }  // destroyed without commit: target untouched, temp removed
  EXPECT_EQ(read_all(path), to_bytes("hello, world"));
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
  EXPECT_THROW_WITH(write_file_atomic((dir_ / "no" / "such" / "f").string(), std::string_view("x")),
                    "cannot create", "no/such");
  EXPECT_NO_THROW(fsync_dir(dir_.string()));
}

}  // namespace
}  // namespace ls::checkpoint
