// World across processes (rank, size, device counts, process-major replica numbers) and the
// failures of the hierarchical host collectives: a process that never calls (the others end
// with a timeout error naming it, within the bound), abort() stopping the MPI poll, a desync
// between processes. Also the program's main(): World::init with --local-devices, then gtest.
// Run: mpirun -np 3 --allow-run-as-root --oversubscribe lockstep_mpi_tests --local-devices 1,2
#include <gtest/gtest.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include <lockstep/error.h>
#include "mpi/mpi_test_main.h"

namespace ls::mpi_test {

namespace {
std::vector<int> g_local_counts = {1};
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  return value != nullptr ? std::atoi(value) : fallback;
}

ErrorKind kind_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return error.kind();
  } catch (...) {
  }
  return ErrorKind::kInternal;
}

std::string message_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& error) {
    return error.what();
  }
}

// Every process waits here before the next test, so no test's timing depends on the last one.
void barrier() {
  if (World::current().uses_mpi()) MPI_Barrier(MPI_COMM_WORLD);
}
}  // namespace

namespace {

TEST(MpiWorld, RankSizeAndProcessMajorReplicas) {
  const World& world = World::current();
  EXPECT_EQ(world.size(), env_int("OMPI_COMM_WORLD_SIZE", 1));
  EXPECT_EQ(world.rank(), env_int("OMPI_COMM_WORLD_RANK", 0));
  EXPECT_EQ(world.uses_mpi(), std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr);
  int first = 0;
  for (int p = 0; p < world.size(); ++p) {
    const int count = g_local_counts[static_cast<size_t>(p) % g_local_counts.size()];
    EXPECT_EQ(world.local_device_count(p), count) << "process " << p;
    EXPECT_EQ(world.first_replica(p), first) << "process " << p;
    for (int l = 0; l < count; ++l) EXPECT_EQ(world.process_of_replica(first + l), p);
    first += count;
  }
  EXPECT_EQ(world.replicas(), first);
  for (int l = 0; l < static_cast<int>(world.local_devices().size()); ++l) {
    EXPECT_EQ(world.global_replica(l), world.first_replica(world.rank()) + l);
  }
  EXPECT_THROW(world.global_replica(static_cast<int>(world.local_devices().size())), Error);
  EXPECT_NE(world.describe().find(world.host_name()), std::string::npos) << world.describe();
  EXPECT_THROW(World::init(world.local_devices()), Error);  // once per process
  // The communicators number replicas the same way.
  Group group;
  for (int l = 0; l < group.local(); ++l) {
    EXPECT_EQ(group.comms[static_cast<size_t>(l)]->rank(), world.global_replica(l));
    EXPECT_EQ(group.comms[static_cast<size_t>(l)]->size(), world.replicas());
  }
}

TEST(MpiWorld, AProcessThatNeverCallsMakesTheOthersTimeOut) {
  const World& world = World::current();
  if (world.size() == 1) GTEST_SKIP() << "needs several processes (mpirun -np 2 or more)";
  const auto timeout = 400ms;
  {
    Group group(timeout);
    const bool skipper = world.rank() == world.size() - 1;
    std::vector<float> data(64, 1.0f);
    if (!skipper) {
      const auto start = Clock::now();
      const auto errors = group.run([&](int, Communicator& comm, Stream& stream) {
        comm.all_reduce(data.data(), data.data(), data.size(), DType::kF32, ReduceOp::kSum, stream);
      });
      const auto elapsed = Clock::now() - start;
      EXPECT_LT(elapsed, 3 * timeout + 1s) << "the bound is the timeout (plus the local barrier)";
      for (const std::exception_ptr& e : errors) {
        ASSERT_TRUE(e) << "a collective whose peer process never came must fail";
        EXPECT_EQ(kind_of(e), ErrorKind::kTimeout) << message_of(e);
        EXPECT_NE(message_of(e).find("process(es) " + std::to_string(world.size() - 1)),
                  std::string::npos)
            << message_of(e);
      }
      // Sticky: the next call fails at once.
      EXPECT_THROW(group.comms[0]->all_reduce(data.data(), data.data(), 1, DType::kF32,
                                              ReduceOp::kSum, *group.streams[0]),
                   Error);
    } else {
      EXPECT_EQ(data[0], 1.0f);  // never touched: this process issued nothing
    }
  }
  barrier();
}

TEST(MpiWorld, AbortStopsTheExchangePoll) {
  const World& world = World::current();
  if (world.size() == 1) GTEST_SKIP() << "needs several processes (mpirun -np 2 or more)";
  {
    Group group(30s);  // only abort() can end this collective in seconds
    if (world.rank() == 0) {
      std::vector<std::vector<float>> data(group.comms.size(), std::vector<float>(64, 1.0f));
      std::thread aborter([&] {
        std::this_thread::sleep_for(200ms);
        group.comms[0]->abort();
      });
      const auto start = Clock::now();
      const auto errors = group.run([&](int l, Communicator& comm, Stream& stream) {
        comm.all_reduce(data[l].data(), data[l].data(), 64, DType::kF32, ReduceOp::kSum, stream);
      });
      aborter.join();
      EXPECT_LT(Clock::now() - start, 5s);
      for (const std::exception_ptr& e : errors) {
        ASSERT_TRUE(e);
        EXPECT_EQ(kind_of(e), ErrorKind::kAborted) << message_of(e);
      }
    } else {
      EXPECT_EQ(group.comms[0]->backend(), "host");  // the others issue nothing
    }
  }
  barrier();
}

TEST(MpiWorld, DesyncBetweenProcessesIsAnErrorEverywhere) {
  const World& world = World::current();
  if (world.size() == 1) GTEST_SKIP() << "needs several processes (mpirun -np 2 or more)";
  {
    Group group(5s);
    const size_t count = world.rank() == 0 ? 8 : 9;
    std::vector<std::vector<float>> data(group.comms.size(), std::vector<float>(9, 1.0f));
    const auto errors = group.run([&](int l, Communicator& comm, Stream& stream) {
      comm.all_reduce(data[l].data(), data[l].data(), count, DType::kF32, ReduceOp::kSum, stream);
    });
    for (const std::exception_ptr& e : errors) {
      ASSERT_TRUE(e);
      EXPECT_EQ(kind_of(e), ErrorKind::kDesync) << message_of(e);
      EXPECT_NE(message_of(e).find("desync across processes"), std::string::npos) << message_of(e);
    }
    for (const auto& buffer : data) EXPECT_EQ(buffer[0], 1.0f) << "no data moved on a desync";
  }
  barrier();
}

}  // namespace
}  // namespace ls::mpi_test

// --local-devices 1,2: process p drives the p-th count (cyclically) of host devices.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--local-devices") {
      ls::mpi_test::g_local_counts.clear();
      std::string list = argv[i + 1];
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        ls::mpi_test::g_local_counts.push_back(std::stoi(list.substr(at, comma - at)));
        at = comma + 1;
      }
    }
  }
  const int rank = ls::mpi_test::env_int("OMPI_COMM_WORLD_RANK", 0);
  const auto& counts = ls::mpi_test::g_local_counts;
  const int mine = counts[static_cast<size_t>(rank) % counts.size()];
  std::vector<ls::Device> devices;
  for (int d = 0; d < mine; ++d) devices.push_back({ls::DeviceKind::kHost, d});
  int result = 1;
  {
    ls::WorldScope world(devices);
    result = RUN_ALL_TESTS();
  }
  return result;
}
