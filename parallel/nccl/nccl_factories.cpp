// The NCCL factories (parallel/nccl/nccl_communicator.h): which ranks a process's clique holds
// and where the ncclUniqueId comes from. make_nccl_communicators: ranks 0..n-1 of one process,
// its own id. make_nccl_world_communicators: one NCCL communicator over every GPU of every process
// of a World, each process holding its own GPUs' ranks (its global replicas) in one clique.
// The world factory is compiled, not yet run on a GPU: it rests on NCCL's documented
// multi-process pattern (one ncclGetUniqueId, broadcast to every process, ncclCommInitRank* of
// each process's ranks inside one group; NCCL user guide, "Creating a communicator" and
// "Examples") and on NCCL's src/init.cc.
//
// Note [NCCL unique id across processes]
// ncclUniqueId is 128 opaque bytes (NCCL_UNIQUE_ID_BYTES, struct { char internal[128]; }) naming
// the bootstrap root that ncclGetUniqueId started in process 0; every rank must get the same
// bytes. Process 0 broadcasts one message with mpi::broadcast_string (bounded by the
// communicator timeout): 'I' + the id's bytes, or 'E' + why process 0 could not make one (its
// devices failed their checks, or ncclGetUniqueId failed), so the others fail at once with
// process 0's reason instead of waiting out their timeout. Then each process checks its own
// devices and initialises its ranks (Note [NCCL init is the barrier]); a process that fails
// after the broadcast leaves the others' initialisation to its timeout, whose message says so.
#include <nccl.h>

#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "engine/core/cuda/cuda_runtime.h"
#include <lockstep/error.h>
#include "parallel/mpi/mpi_runtime.h"
#include "parallel/nccl/nccl_clique.h"
#include "parallel/nccl/nccl_communicator.h"
#include "parallel/nccl/nccl_types.h"

namespace ls {

ncclUniqueId nccl_unique_id(const std::string& where) {
  ncclUniqueId id{};
  const ncclResult_t result = ncclGetUniqueId(&id);
  LS_CHECK_AS(ErrorKind::kInternal, result == ncclSuccess, "cannot make NCCL communicators for ",
              where, ": ncclGetUniqueId failed: ", nccl_error_text(result, nullptr));
  return id;
}

void check_nccl_devices_exist(const std::vector<Device>& devices, const std::string& who) {
  const CudaAvailability available = cuda_availability();
  LS_CHECK(available.device_count > 0, who, ": cannot make NCCL communicators for ",
           devices_str(devices), ": ", available.reason_unavailable);
  for (const Device& device : devices) {
    LS_CHECK(device.index < available.device_count, who, ": cannot make NCCL communicators for ",
             devices_str(devices), ": ", device.str(), " does not exist; this process sees ",
             available.device_count, " CUDA device(s), cuda:0 to cuda:", available.device_count - 1,
             " (CUDA_VISIBLE_DEVICES renumbers them)");
  }
}

// Checks that need no CUDA call come first, so that bad device lists fail the same way on
// machines with and without a GPU. See Note [NCCL init is the barrier].
std::vector<std::unique_ptr<Communicator>> make_nccl_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options) {
  check_clique_devices(devices, options, "make_nccl_communicators", DeviceKind::kCuda);
  check_nccl_devices_exist(devices, "make_nccl_communicators");
  NcclRanks ranks;
  ranks.id = nccl_unique_id(devices_str(devices));
  ranks.nranks = static_cast<int>(devices.size());
  return make_nccl_clique(devices, ranks, options.timeout);
}

namespace {

constexpr char kIdTag = 'I';
constexpr char kErrorTag = 'E';

// Process 0's side: the id message to broadcast, and the error to rethrow after it (if any).
std::string root_message(const World& world, std::exception_ptr* failure) {
  try {
    check_nccl_devices_exist(world.local_devices(),
                             "make_world_communicators on " + world.describe());
    const ncclUniqueId id = nccl_unique_id(world.describe());
    return std::string(1, kIdTag) + std::string(id.internal, sizeof(id.internal));
  } catch (const Error& e) {
    *failure = std::current_exception();
    return std::string(1, kErrorTag) + e.message();  // without process 0's file:line
  } catch (const std::exception& e) {
    *failure = std::current_exception();
    return std::string(1, kErrorTag) + e.what();
  }
}

// Every other process's side: the id in `message`, or the error process 0 sent.
ncclUniqueId id_of(const std::string& message, const World& world) {
  LS_CHECK(!message.empty() && message[0] != kErrorTag, "make_world_communicators on ",
           world.describe(), ": process 0 could not start NCCL, so no process can: ",
           message.empty() ? "(empty message)" : message.substr(1));
  ncclUniqueId id{};
  LS_CHECK(message[0] == kIdTag && message.size() == 1 + sizeof(id.internal),
           "make_world_communicators on ", world.describe(), ": process 0 sent a ", message.size(),
           "-byte NCCL id message, expected ", 1 + sizeof(id.internal),
           "; every process must run the same lockstep build (lockstep-doctor under the same "
           "mpirun compares them)");
  std::memcpy(id.internal, message.data() + 1, sizeof(id.internal));
  return id;
}

}  // namespace

std::vector<std::unique_ptr<Communicator>> make_nccl_world_communicators(
    const World& world, const CommunicatorOptions& options) {
  const std::vector<Device>& devices = world.local_devices();
  check_clique_devices(devices, options, "make_world_communicators", DeviceKind::kCuda);
  std::exception_ptr root_failure;
  std::string message;
  if (world.rank() == 0) message = root_message(world, &root_failure);
  const std::string what = "make_world_communicators: the NCCL unique id from process 0 to " +
                           world.describe() +
                           " (every process must call make_world_communicators, in the same "
                           "order as the other collectives across processes)";
  message = mpi::broadcast_string(message, 0, options.timeout, what.c_str());
  if (root_failure) std::rethrow_exception(root_failure);
  NcclRanks ranks;
  ranks.id = id_of(message, world);
  if (world.rank() != 0) {
    check_nccl_devices_exist(devices, "make_world_communicators on " + world.describe());
  }
  ranks.nranks = world.replicas();
  ranks.first = world.first_replica(world.rank());
  ranks.process = world.describe();
  return make_nccl_clique(devices, ranks, options.timeout);
}

}  // namespace ls
