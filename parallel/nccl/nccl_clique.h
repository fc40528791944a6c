// What the two NCCL factories share (parallel/nccl/ only: it includes nccl.h). A clique is the
// NCCL communicators of ONE process, made in one group and torn down together; it holds ranks
// first..first+n-1 of a communicator of nranks ranks. In one process (make_nccl_communicators)
// that is ranks 0..n-1 of n; in a World (make_nccl_world_communicators, nccl_factories.cpp) it is
// the process's global replicas, and the other processes hold the other ranks under the same id.
#pragma once

#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <lockstep/device.h>
#include "parallel/comm/communicator.h"

namespace ls {

struct NcclRanks {
  ncclUniqueId id{};    // ncclGetUniqueId's, the same in every process
  int nranks = 0;       // ranks of the whole communicator, over every process
  int first = 0;        // the rank of the clique's first device
  std::string process;  // names this process in messages (World::describe()); "" when alone
};

// ncclGetUniqueId, or an ls::Error with NCCL's text. `where` names the caller in the message.
ncclUniqueId nccl_unique_id(const std::string& where);

// Throws when CUDA is unusable here or a device of `devices` does not exist in this process.
// No NCCL call; `who` starts the message.
void check_nccl_devices_exist(const std::vector<Device>& devices, const std::string& who);

// Makes the clique of `devices` (checked already) as ranks ranks.first.. of ranks.nranks: one
// group of ncclCommInitRankConfig (blocking = 0), polled until every rank is ready, bounded by
// `timeout` (see Note [NCCL init is the barrier] in nccl_communicator.cpp). One communicator per
// device, in order; rank() is the NCCL rank, size() ranks.nranks.
std::vector<std::unique_ptr<Communicator>> make_nccl_clique(const std::vector<Device>& devices,
                                                            const NcclRanks& ranks,
                                                            std::chrono::milliseconds timeout);

}  // namespace ls
