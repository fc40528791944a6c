// The NCCL Communicator: one non-blocking ncclComm_t per CUDA device of one process, all made
// together (one ncclGroupStart/End over ncclCommInitRankConfig with config.blocking = 0) and owned
// together by an NcclClique (nccl_communicator.cpp). make_nccl_communicators() makes the clique
// of one process (ranks 0..n-1); make_nccl_world_communicators() makes this process's part of one
// NCCL communicator spanning every GPU of every process of a World (ranks = global replicas).
//
// Each collective is enqueued on the given CUDA stream and returns once NCCL has enqueued it; the
// data moves when the stream gets there. A non-blocking communicator may answer ncclInProgress:
// the call then polls ncclCommGetAsyncError until NCCL is done, bounded by the options' timeout
// and by abort(). Arguments, in place and count 0 follow NCCL (parallel/comm/communicator.h).
// abort() aborts every communicator of the clique (ncclCommAbort, once); any thread may call it,
// also while a rank polls. Afterwards every call throws "communicator aborted". Enqueued NCCL
// kernels exit early, leaving their outputs undefined; abort the streams to end waits on them.
// In a World of several processes abort() reaches this process's communicators only; the other
// processes' ranks then fail with NCCL's remote error or at their timeout.
// Thread-safety: one thread per communicator (its replica's); abort() from any thread. A group
// spanning several communicators must be issued entirely by one thread (see
// Note [NCCL groups and abort] in the .cpp); group_start()/group_end() must balance, also on
// error paths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include <lockstep/world.h>

namespace ls {

class NcclClique;  // parallel/nccl/nccl_communicator.cpp

class NcclCommunicator final : public DescribedCommunicator {
 public:
  // The communicator of the clique's local rank `local` (0..its device count - 1).
  NcclCommunicator(std::shared_ptr<NcclClique> clique, int local);
  // The clique finalizes and destroys the NCCL communicators when its last rank goes.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }  // the NCCL rank: the global replica in a World
  int size() const override;                   // every rank of every process
  Device device() const override { return device_; }
  std::string backend() const override { return "nccl"; }

  void group_start() override;
  void group_end() override;
  void abort() override;

  // Whether NCCL honoured blocking = 0 (NCCL_COMM_BLOCKING=1 in the environment or an NCCL
  // config file overrides it; then no NCCL call can be interrupted).
  bool nonblocking() const;
  // Why the clique was aborted; "" while it was not.
  std::string abort_reason() const;

 private:
  // Checks the arguments, numbers the collective and hands it to NCCL.
  void issue(CollectiveDesc desc, Stream& stream) override;

  std::shared_ptr<NcclClique> clique_;
  int local_;  // index into the clique (this process's devices)
  int rank_;   // NCCL rank: the clique's first rank + local_
  Device device_;
  int group_depth_ = 0;  // group_start() calls not yet matched on this communicator
  int64_t issued_ = 0;   // collectives issued (a collective's seq is the count after it)
};

// One communicator per local CUDA device of `world`, all ranks of ONE NCCL communicator over every
// GPU of every process (world.replicas() ranks; local device i is rank world.global_replica(i)).
// Collective over the processes: process 0 makes the ncclUniqueId, World's MPI broadcasts it
// (bounded by options.timeout), then each process initialises its local ranks as
// make_nccl_communicators does. Errors name the process (World::describe) and the global ranks.
// Compiled, not yet run on a GPU (docs/architecture.md, "Several processes").
std::vector<std::unique_ptr<Communicator>> make_nccl_world_communicators(
    const World& world, const CommunicatorOptions& options);

}  // namespace ls
