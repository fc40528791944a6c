// World (lockstep/world.h) and make_world_communicators (parallel/runtime/world_communicators.h).
// Whether this process was launched by mpirun is read from the environment before any MPI call,
// so a plain run never touches MPI: it is a world of one process, size 1, rank 0.
#include <lockstep/world.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/nccl/nccl_communicator.h"
#include "parallel/runtime/world_communicators.h"

namespace ls {
namespace {

std::unique_ptr<World>& the_world() {
  static std::unique_ptr<World> world;
  return world;
}

// The process count the launcher announced: Open MPI's OMPI_COMM_WORLD_SIZE, else PMI_SIZE
// (MPICH, Slurm); 0 when the process was not started by an MPI launcher.
int launcher_size() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* value = std::getenv(name); value != nullptr && *value != '\0') {
      return std::atoi(value);
    }
  }
  return 0;
}

std::string this_host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace

World& World::init(std::vector<Device> local_devices, const WorldOptions& options) {
  LS_CHECK(!the_world(),
           "World::init() was called twice; call it once per process (MPI may be "
           "initialised only once) and use World::current() afterwards");
  LS_CHECK(!local_devices.empty(),
           "World::init() needs at least one local device; pass the "
           "devices this process drives, e.g. parse_devices(\"host:2\")");
  LS_CHECK(options.timeout.count() > 0, "WorldOptions::timeout must be positive, got ",
           options.timeout.count(), " ms");
  const int launched = launcher_size();
  LS_CHECK(!(launched > 0 && mpi::finalized()),
           "World::init() after World::finalize() under mpirun: MPI cannot be initialised twice "
           "in one process; keep one World for the whole run");
  std::unique_ptr<World> world(new World());
  world->host_name_ = this_host_name();
  world->timeout_ = options.timeout;
  const int local_count = static_cast<int>(local_devices.size());
  world->local_devices_ = std::move(local_devices);
  if (launched > 1 || (launched == 1 && mpi::built_with_mpi())) {
    const mpi::Launch launch = mpi::init();  // throws in a build without MPI
    world->rank_ = launch.rank;
    world->size_ = launch.size;
    world->uses_mpi_ = true;
    world->counts_ = mpi::allgather_int(
        local_count, options.timeout,
        "World::init(): the exchange of device counts (every process started by mpirun must "
        "call World::init(); raise WorldOptions::timeout if some start slowly)");
    world->host_names_ = mpi::allgather_string(world->host_name_, options.timeout,
                                               "World::init(): the exchange of host names");
  } else {
    world->counts_ = {local_count};
    world->host_names_ = {world->host_name_};
  }
  world->set_device_counts(world->counts_);
  the_world() = std::move(world);
  return *the_world();
}

void World::set_device_counts(std::vector<int> counts) {
  counts_ = std::move(counts);
  firsts_.clear();
  int first = 0;
  for (int count : counts_) {
    firsts_.push_back(first);
    first += count;
  }
  replicas_ = first;
}

std::unique_ptr<World> World::with_local_devices(std::vector<Device> local_devices) const {
  LS_CHECK(!local_devices.empty(), "World::with_local_devices() needs at least one device");
  std::unique_ptr<World> world(new World());
  world->rank_ = rank_;
  world->size_ = size_;
  world->uses_mpi_ = uses_mpi_;
  world->host_name_ = host_name_;
  world->host_names_ = host_names_;
  world->timeout_ = timeout_;
  const int local_count = static_cast<int>(local_devices.size());
  world->local_devices_ = std::move(local_devices);
  world->set_device_counts(size_ == 1 ? std::vector<int>{local_count}
                                      : mpi::allgather_int(local_count, timeout_,
                                                           "World::with_local_devices(): the "
                                                           "exchange of device counts"));
  return world;
}

bool World::initialized() { return the_world() != nullptr; }

World& World::current() {
  LS_CHECK(the_world(),
           "World::current() before World::init(); call World::init(devices) (or "
           "make a WorldScope) at the start of main");
  return *the_world();
}

void World::abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (the_world() && the_world()->uses_mpi()) mpi::abort(exit_code);
  std::exit(exit_code);
}

void World::finalize() {
  the_world().reset();
  mpi::finalize();
}

int World::local_device_count(int process) const {
  check_process(process);
  return counts_[static_cast<size_t>(process)];
}

void World::check_process(int process) const {
  LS_CHECK(process >= 0 && process < size_, "process ", process, " is not in this world of ", size_,
           " processes (0..", size_ - 1, ")");
}

const std::string& World::host_name(int process) const {
  check_process(process);
  return host_names_[static_cast<size_t>(process)];
}

int World::first_replica(int process) const {
  check_process(process);
  return firsts_[static_cast<size_t>(process)];
}

int World::global_replica(int local_index) const {
  LS_CHECK(local_index >= 0 && local_index < static_cast<int>(local_devices_.size()),
           "local device index ", local_index, " is out of range: this process drives ",
           local_devices_.size(), " devices (", devices_str(local_devices_), ")");
  return firsts_[static_cast<size_t>(rank_)] + local_index;
}

int World::process_of_replica(int replica) const {
  LS_CHECK(replica >= 0 && replica < replicas_, "replica ", replica, " is not in this world of ",
           replicas_, " replicas (0..", replicas_ - 1, ")");
  int process = 0;
  while (process + 1 < size_ && firsts_[static_cast<size_t>(process) + 1] <= replica) ++process;
  return process;
}

std::string World::describe() const {
  const int first = firsts_[static_cast<size_t>(rank_)];
  return detail::concat("process ", rank_, " of ", size_, " on ", host_name_, " (",
                        devices_str(local_devices_), " = replicas ", first, "..",
                        first + static_cast<int>(local_devices_.size()) - 1, " of ", replicas_,
                        ")");
}

bool World::any_process(bool flag) const { return any_process(flag, timeout_); }

bool World::any_process(bool flag, std::chrono::milliseconds timeout) const {
  if (size_ == 1) return flag;
  const std::vector<int> flags = mpi::allgather_int(flag ? 1 : 0, timeout, "World::any_process");
  return std::find(flags.begin(), flags.end(), 1) != flags.end();
}

std::vector<std::unique_ptr<Communicator>> make_world_communicators(
    const World& world, const CommunicatorOptions& options) {
  if (world.size() == 1) return make_communicators(world.local_devices(), options);
  check_clique_devices(world.local_devices(), options, "make_world_communicators");
  // Host processes and CUDA processes would start different MPI collectives (an MPI error, or
  // a hang), so every process first learns every process's device kind and all refuse a mix.
  const DeviceKind kind = world.local_devices().front().kind;
  const std::vector<int> kinds = mpi::allgather_int(
      static_cast<int>(kind), options.timeout,
      "make_world_communicators: the exchange of device kinds (every process must call it, in "
      "the same order as the other collectives across processes)");
  for (int p = 0; p < world.size(); ++p) {
    const auto theirs = static_cast<DeviceKind>(kinds[static_cast<size_t>(p)]);
    LS_CHECK(theirs == kind, "make_world_communicators on ", world.describe(), ": process ", p,
             " drives ", theirs == DeviceKind::kCuda ? "CUDA" : "host", " devices and this one ",
             kind == DeviceKind::kCuda ? "CUDA" : "host",
             " devices; every process of a world must drive devices of one kind (all cuda or "
             "all host): give every process the same kind of --devices");
  }
  if (kind == DeviceKind::kCuda) return make_nccl_world_communicators(world, options);
  return make_mpi_host_communicators(world, options);
}

}  // namespace ls
