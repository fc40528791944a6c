// Tests for checkpoint retention and disk-space safety (Note [Checkpoint retention] in
// engine/model/checkpoint/checkpoint.cpp): which step directories a commit keeps, that a crash
// while pruning leaves only complete checkpoints, that a commit refuses to start without the
// free space it needs, and that a write failing half-way (RLIMIT_FSIZE, in a child process)
// leaves the previous checkpoint and `latest` intact.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_fixture.h"

namespace ls::checkpoint {
namespace {

using namespace testing;  // NOLINT: the checkpoint test helpers
using Names = std::vector<std::string>;

uint64_t bytes_in(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) total += fs::file_size(e.path());
  return total;
}

TEST_F(CheckpointTest, ByDefaultTheNewestThreeAreKept) {
  for (int64_t step = 1; step <= 6; ++step) commit(State(step));
  EXPECT_EQ(step_names(), (Names{"step-000004", "step-000005", "step-000006"}));
  EXPECT_EQ(latest_text(), "step-000006\n");
  for (int64_t step = 4; step <= 6; ++step)
    expect_state(load_checkpoint(step_dir(step)), State(step));
  EXPECT_TRUE(hidden_entries().empty());
}

TEST_F(CheckpointTest, KeepLastOneKeepsOnlyTheNewAndZeroKeepsAll) {
  for (int64_t step = 1; step <= 3; ++step) commit(State(step), {.keep_last = 0});
  EXPECT_EQ(step_names().size(), 3u);
  commit(State(4), {.keep_last = 1});
  EXPECT_EQ(step_names(), (Names{"step-000004"}));
  expect_state(load_checkpoint(dir_.string()), State(4));
}

TEST_F(CheckpointTest, KeepEveryKeepsTheMultiplesBesideTheNewest) {
  for (int64_t step = 1; step <= 10; ++step) commit(State(step), {.keep_last = 2, .keep_every = 4});
  EXPECT_EQ(step_names(), (Names{"step-000004", "step-000008", "step-000009", "step-000010"}));
}

TEST_F(CheckpointTest, HigherStepsThanTheNewCommitAreLeftAlone) {
  // A run resumed from step 10 commits 15 while 20 and 30 exist: those are another timeline's
  // work (replaced when this run reaches them), never pruned as "old".
  for (int64_t step : {10, 20, 30}) commit(State(step));
  commit(State(15), {.keep_last = 1});
  EXPECT_EQ(step_names(), (Names{"step-000015", "step-000020", "step-000030"}));
  EXPECT_EQ(latest_text(), "step-000015\n");
}

TEST_F(CheckpointTest, BadRetentionIsAUsageError) {
  try {
    commit(State(1), {.keep_last = -1});
    FAIL() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_TRUE(contains_all(e.message(), {"keep_last (-1)", "must be >= 0"}));
  }
  EXPECT_FALSE(fs::exists(dir_ / "latest"));
}

TEST_F(CheckpointTest, CrashWhilePruningLeavesOnlyCompleteCheckpoints) {
  const CheckpointRetention keep2{.keep_last = 2};
  commit(State(1), keep2);
  commit(State(2), keep2);
  set_checkpoint_crash_point_for_testing(CrashPoint::kDuringPrune);
  EXPECT_THROW(commit(State(3), keep2), SimulatedCrash);
  // The new checkpoint is committed; the pruned one is gone from its step name, whole.
  EXPECT_EQ(latest_text(), "step-000003\n");
  EXPECT_EQ(step_names(), (Names{"step-000002", "step-000003"}));
  for (int64_t step : {2, 3}) expect_state(load_checkpoint(step_dir(step)), State(step));
  EXPECT_EQ(hidden_entries().size(), 1u);  // its trash directory
  // The next commit deletes the leftover trash.
  commit(State(4), keep2);
  EXPECT_EQ(step_names(), (Names{"step-000003", "step-000004"}));
  EXPECT_TRUE(hidden_entries().empty());
}

TEST_F(CheckpointTest, TooLittleFreeSpaceFailsBeforeWriting) {
  commit(State(1));
  const State next(2);
  const uint64_t needed = checkpoint_bytes_needed(next.model(), next.optimizer());
  set_free_disk_bytes_for_testing(needed - 1);
  try {
    commit(next);
    FAIL() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_TRUE(contains_all(
        e.message(), {"not enough disk space", dir_.string(), std::to_string(needed) + " bytes",
                      std::to_string(needed - 1) + " bytes"}));
  }
  EXPECT_EQ(latest_text(), "step-000001\n");
  EXPECT_EQ(step_names(), (Names{"step-000001"}));
  EXPECT_TRUE(hidden_entries().empty());
  // Exactly enough is enough, and the estimate covers what the commit really wrote.
  set_free_disk_bytes_for_testing(needed);
  commit(next);
  EXPECT_GE(needed, bytes_in(step_dir(2)) + fs::file_size(dir_ / "latest"));
}

TEST_F(CheckpointTest, ShortOfSpaceTheCheckpointsRetentionDropsGoFirst) {
  const CheckpointRetention keep2{.keep_last = 2};
  for (int64_t step = 1; step <= 4; ++step) commit(State(step), {.keep_last = 0});
  const State next(5);
  set_free_disk_bytes_for_testing(checkpoint_bytes_needed(next.model(), next.optimizer()) - 1);
  // Still short after pruning (the simulated free space does not grow): an error, but the
  // checkpoints the commit would have pruned anyway are gone, and `latest` is kept.
  try {
    commit(next, keep2);
    FAIL() << "expected an ls::Error";
  } catch (const Error& e) {
    EXPECT_TRUE(contains_all(e.message(), {"not enough disk space",
                                           "after removing the old "
                                           "checkpoints retention allows",
                                           "DIR/latest"}));
  }
  EXPECT_EQ(step_names(), (Names{"step-000004"}));
  EXPECT_EQ(latest_text(), "step-000004\n");
  expect_state(load_checkpoint(dir_.string()), State(4));
}

// In a child process limited to 64 KiB per file (as `ulimit -f 64` would), commits a checkpoint
// whose files are larger. Exit status 0: the commit failed with an io error saying why.
int commit_under_file_size_limit(const std::string& dir) {
  ::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills the process instead of failing write()
  const rlimit limit{64 << 10, 64 << 10};
  if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 3;
  const State big(2, 100000);  // 400 KB per tensor
  try {
    commit_checkpoint(dir, big.meta, big.model(), big.optimizer());
  } catch (const Error& e) {
    const bool named =
        e.kind() == ErrorKind::kIo && e.message().find("File too large") != std::string::npos;
    return named ? 0 : 2;
  } catch (...) {
    return 4;
  }
  return 1;  // committed despite the limit
}

TEST_F(CheckpointTest, AWriteThatFailsHalfWayLeavesThePreviousCheckpoint) {
  commit(State(1));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(commit_under_file_size_limit(dir_.string()));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "child ended by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "0: io error naming EFBIG; 1: it committed; 2: wrong error";
  EXPECT_EQ(latest_text(), "step-000001\n");
  expect_state(load_checkpoint(dir_.string()), State(1));
  EXPECT_EQ(step_names(), (Names{"step-000001"}));
  // Whatever the failed commit left behind is gone after the next one.
  commit(State(3));
  EXPECT_TRUE(hidden_entries().empty());
  EXPECT_EQ(step_names(), (Names{"step-000001", "step-000003"}));
}

}  // namespace
}  // namespace ls::checkpoint
