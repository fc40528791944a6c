// The NCCL Communicator: one non-blocking ncclComm_t per CUDA device of one process, all made
// together by make_nccl_communicators() (one ncclGroupStart/End over ncclCommInitRankConfig with
// config.blocking = 0) and owned together by an NcclClique (nccl_communicator.cpp).
//
// Each collective is enqueued on the given CUDA stream and returns once NCCL has enqueued it; the
// data moves when the stream gets there. A non-blocking communicator may answer ncclInProgress:
// the call then polls ncclCommGetAsyncError until NCCL is done, bounded by the options' timeout
// and by abort(). Arguments, in place and count 0 follow NCCL (parallel/communicator.h).
// abort() aborts every communicator of the clique (ncclCommAbort, once); any thread may call it,
// also while a rank polls. Afterwards every call throws "communicator aborted". Enqueued NCCL
// kernels exit early, leaving their outputs undefined; abort the streams to end waits on them.
// Thread-safety: one thread per communicator (its replica's); abort() from any thread. A group
// spanning several communicators must be issued entirely by one thread (see
// Note [NCCL groups and abort] in the .cpp); group_start()/group_end() must balance, also on
// error paths.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "parallel/communicator.h"

namespace ls {

class NcclClique;  // parallel/nccl/nccl_communicator.cpp

class NcclCommunicator final : public DescribedCommunicator {
 public:
  NcclCommunicator(std::shared_ptr<NcclClique> clique, int rank);
  // The clique finalizes and destroys the NCCL communicators when its last rank goes.
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override;
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
  int rank_;
  Device device_;
  int group_depth_ = 0;  // group_start() calls not yet matched on this communicator
  int64_t issued_ = 0;   // collectives issued (a collective's seq is the count after it)
};

}  // namespace ls
