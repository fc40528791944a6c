// World in a plain process (no mpirun): a world of one process that never touches MPI, whose
// communicators are exactly the in-process ones (make_communicators), with process-major
// replica numbers; bad calls fail with messages that say how to fix them.
// The multi-process cases run in tests/mpi/ (lockstep_mpi_tests under mpirun).
#include <lockstep/world.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include <lockstep/error.h>
#include "parallel/host/host_communicator.h"
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/runtime/world_communicators.h"

namespace ls {
namespace {

TEST(World, APlainProcessIsAWorldOfOne) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test outside mpirun";
  WorldScope world(parse_devices("host:3"));
  EXPECT_EQ(world->rank(), 0);
  EXPECT_EQ(world->size(), 1);
  EXPECT_FALSE(world->uses_mpi());
  EXPECT_EQ(world->replicas(), 3);
  EXPECT_EQ(world->local_device_count(0), 3);
  EXPECT_EQ(world->global_replica(2), 2);
  EXPECT_EQ(world->process_of_replica(2), 0);
  EXPECT_FALSE(world->host_name().empty());
  EXPECT_THROW(world->global_replica(3), Error);
  EXPECT_THROW(world->local_device_count(1), Error);
  EXPECT_THROW(World::init(parse_devices("host:1")), Error);  // once per process
  // The same communicators as without a World: the in-process host clique.
  const auto comms = make_world_communicators(*world, CommunicatorOptions{});
  ASSERT_EQ(comms.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(comms[static_cast<size_t>(r)]->rank(), r);
    EXPECT_EQ(comms[static_cast<size_t>(r)]->size(), 3);
    EXPECT_NE(dynamic_cast<HostCommunicator*>(comms[static_cast<size_t>(r)].get()), nullptr);
  }
}

TEST(World, InitAgainAfterFinalizeInAPlainProcess) {
  { WorldScope first(parse_devices("host:1")); }
  EXPECT_FALSE(World::initialized());
  EXPECT_THROW(World::current(), Error);
  WorldScope second(parse_devices("host:2"));
  EXPECT_EQ(World::current().replicas(), 2);
}

TEST(World, NeedsDevices) { EXPECT_THROW(World::init({}), Error); }

// A build without MPI refuses a launch by `mpirun -np 2` and says how to get an MPI build (with
// MPI, the same environment would start MPI for real: tests/mpi/ covers that).
TEST(World, WithoutMpiSeveralProcessesAreRefused) {
  if (mpi::built_with_mpi()) GTEST_SKIP() << "this build has MPI: see lockstep_mpi_tests";
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  try {
    World::init(parse_devices("host:1"));
    ADD_FAILURE() << "World::init under OMPI_COMM_WORLD_SIZE=2 must throw without MPI";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("built without MPI"), std::string::npos)
        << error.what();
  }
  unsetenv("OMPI_COMM_WORLD_SIZE");
  EXPECT_FALSE(World::initialized());
}

}  // namespace
}  // namespace ls
