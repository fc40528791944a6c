// The host Communicator across processes: hierarchical collectives over the host devices of
// every process of a World (replica numbering process-major, lockstep/world.h).
//
// Each collective is one task on the caller's host stream, in three phases (see Note
// [Hierarchical host collectives] in the .cpp): the process's local ranks reduce (or gather)
// their buffers through the in-process HostClique; ONE thread per process (local rank 0)
// exchanges the process's partial with the other processes through non-blocking MPI calls polled
// with a deadline (the timeout; abort() stops the poll); the result is spread back locally.
// Summation order, the same bits for the same world shape: in f32, local ranks 0..L-1 of each
// process in order, then the processes' partials in process order 0..P-1 (never MPI's own
// reduction order); kAvg divides that sum by the total replica count; bf16 is rounded once.
// Thread-safety: one thread per communicator (its replica's); abort() from any thread.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/communicator.h"
#include <lockstep/world.h>

namespace ls {

class ProcessClique;  // the state the local ranks of one process share (in the .cpp)

class MpiHostCommunicator final : public DescribedCommunicator {
 public:
  MpiHostCommunicator(std::shared_ptr<ProcessClique> clique, int local_rank, int global_rank,
                      int global_size, Device device);

  int rank() const override { return global_rank_; }
  int size() const override { return global_size_; }
  Device device() const override { return device_; }
  std::string backend() const override { return "host"; }

  void group_start() override { ++group_depth_; }
  void group_end() override;
  // Fails this process's clique: blocked and later collectives here throw "aborted". The other
  // processes see a timeout unless told otherwise (DataParallel and Pipeline post a failure
  // notice to them: parallel/runtime/process_group.h).
  void abort() override;
  std::string waiting_for() const override;

 private:
  void issue(CollectiveDesc desc, Stream& stream) override;

  std::shared_ptr<ProcessClique> clique_;
  int local_rank_;
  int global_rank_;
  int global_size_;
  Device device_;
  int group_depth_ = 0;
};

}  // namespace ls
