// The exchanges between processes (parallel/mpi/mpi_runtime.h: allgather_int, allgather_doubles,
// allgather_string, gather_floats, broadcast_string) with exact values, uneven and empty parts;
// two processes at different exchanges (a desync error everywhere, and the next exchange still
// works); failure notices kept apart per channel. MpiExchangePoison (its own ctest, since it
// leaves the exchanges unusable for the rest of the program): a notice stops a waiting exchange,
// and every later exchange fails at once.
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include "mpi/mpi_test_main.h"
#include "parallel/mpi/mpi_runtime.h"

namespace ls::mpi_test {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

void barrier() {
  if (World::current().uses_mpi()) MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MpiExchange, EveryKindWithExactValues) {
  barrier();
  const World& world = World::current();
  const int rank = world.rank(), size = world.size();
  const std::vector<int> ints = mpi::allgather_int(10 * rank + 1, 10s, "test: ints");
  ASSERT_EQ(static_cast<int>(ints.size()), size);
  for (int p = 0; p < size; ++p) EXPECT_EQ(ints[static_cast<size_t>(p)], 10 * p + 1);

  const std::vector<double> mine = {rank + 0.5, -1.0 * rank};
  const std::vector<double> doubles = mpi::allgather_doubles(mine, 10s, "test: doubles");
  ASSERT_EQ(doubles.size(), 2u * static_cast<size_t>(size));
  for (int p = 0; p < size; ++p) {
    EXPECT_EQ(doubles[2 * static_cast<size_t>(p)], p + 0.5);
    EXPECT_EQ(doubles[2 * static_cast<size_t>(p) + 1], -1.0 * p);
  }

  // Process p sends p characters (process 0 an empty string).
  const std::vector<std::string> texts = mpi::allgather_string(
      std::string(static_cast<size_t>(rank), static_cast<char>('a' + rank)), 10s, "test: strings");
  ASSERT_EQ(static_cast<int>(texts.size()), size);
  for (int p = 0; p < size; ++p) {
    EXPECT_EQ(texts[static_cast<size_t>(p)],
              std::string(static_cast<size_t>(p), static_cast<char>('a' + p)));
  }

  // Process p sends p floats valued p + i / 8; the last process is the root.
  std::vector<float> floats;
  for (int i = 0; i < rank; ++i) floats.push_back(static_cast<float>(rank) + i / 8.0f);
  const int root = size - 1;
  const std::vector<std::vector<float>> gathered =
      mpi::gather_floats(floats, root, 10s, "test: floats");
  if (rank != root) {
    EXPECT_TRUE(gathered.empty());
  } else {
    ASSERT_EQ(static_cast<int>(gathered.size()), size);
    for (int p = 0; p < size; ++p) {
      ASSERT_EQ(static_cast<int>(gathered[static_cast<size_t>(p)].size()), p);
      for (int i = 0; i < p; ++i) {
        EXPECT_EQ(gathered[static_cast<size_t>(p)][static_cast<size_t>(i)],
                  static_cast<float>(p) + i / 8.0f);
      }
    }
  }

  const std::string from_root = mpi::broadcast_string(
      rank == root ? std::string("the root's text") : std::string("ignored, longer text"), root,
      10s, "test: broadcast");
  EXPECT_EQ(from_root, "the root's text");
  EXPECT_EQ(mpi::broadcast_string(std::string(), 0, 10s, "test: empty broadcast"), "");
}

TEST(MpiExchange, ProcessesAtDifferentExchangesGetADesyncAndStayInStep) {
  const World& world = World::current();
  if (world.size() < 2) GTEST_SKIP() << "needs two processes";
  barrier();
  const char* what = world.rank() == 1 ? "test: exchange B" : "test: exchange A";
  try {
    mpi::allgather_int(1, 10s, what);
    ADD_FAILURE() << "process " << world.rank() << ": no desync error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDesync) << e.what();
    EXPECT_NE(std::string(e.what()).find("out of step"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
  // The headers matched each other, so the next exchange works.
  const std::vector<int> after = mpi::allgather_int(world.rank(), 10s, "test: after a desync");
  for (int p = 0; p < world.size(); ++p) EXPECT_EQ(after[static_cast<size_t>(p)], p);
}

TEST(MpiExchange, NoticesReachEveryOtherProcessOnTheirOwnChannel) {
  const World& world = World::current();
  if (world.size() < 2) GTEST_SKIP() << "needs two processes";
  barrier();
  mpi::FailureChannel first, second;  // made in the same order everywhere: tags k, k + 1
  if (world.rank() == 1) first.post(ErrorKind::kTimeout, "process 1's failure");
  if (world.rank() != 1) {
    const Clock::time_point deadline = Clock::now() + 10s;
    while (!first.notice() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
    ASSERT_TRUE(first.notice().has_value()) << "no notice within 10 s";
    EXPECT_EQ(first.notice()->process, 1);
    EXPECT_EQ(first.notice()->kind, ErrorKind::kTimeout);
    EXPECT_EQ(first.notice()->message, "process 1's failure");
  }
  EXPECT_FALSE(second.notice().has_value()) << "a notice crossed to another run's channel";
  EXPECT_FALSE(world.rank() == 1 && first.notice().has_value()) << "a process heard itself";
  barrier();
}

// Its own ctest (tests/CMakeLists.txt): after it, this program's exchanges are unusable.
TEST(MpiExchangePoison, ANoticeStopsAWaitingExchangeAndLaterOnesFailAtOnce) {
  const World& world = World::current();
  if (world.size() < 2) GTEST_SKIP() << "needs two processes";
  barrier();
  mpi::FailureChannel channel;
  const Clock::time_point start = Clock::now();
  if (world.rank() == 1) {
    channel.post(ErrorKind::kInternal, "process 1 failed before the exchange");
  } else {
    try {
      mpi::allgather_int(0, 20s, "test: an exchange process 1 never joins", &channel);
      ADD_FAILURE() << "the exchange completed without process 1";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find("process 1 failed before the exchange"), 0u) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 10.0)
        << "stopped by the timeout, not by the notice";
    try {
      mpi::allgather_int(0, 20s, "test: a later exchange");
      ADD_FAILURE() << "an exchange after a given-up one ran";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kAborted) << e.what();
      EXPECT_NE(std::string(e.what()).find("out of step since an earlier one"), std::string::npos)
          << e.what();
    }
  }
  barrier();
}

}  // namespace
}  // namespace ls::mpi_test
