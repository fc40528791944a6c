// The host Communicator: NCCL's collectives between the host devices of one process, through
// shared memory (the ranks read each other's buffers directly).
//
// Each call checks its arguments, takes the rank's next sequence number and enqueues ONE task on
// the given host stream: publish the descriptor, arrival barrier + desync check, the work phase,
// exit barrier (parallel/host/host_clique.h). It returns at once; errors (desync, timeout,
// abort) surface at the stream's next synchronize(). Inside a group, as with NCCL (which launches
// a group's kernels at ncclGroupEnd), the tasks are enqueued in order when the outermost
// group_end() returns, not at each call: work a caller puts on the stream between a call and the
// group's end runs before the collective, on both backends. Once the clique has failed, every later
// call throws that failure at once, from the call itself, and every pending one at its stream.
// Reductions accumulate in f32 over ranks 0..N-1 in that order (bitwise deterministic); bf16 is
// rounded once at the end; kAvg is the f32 sum divided by N; kMax propagates NaN.
// Thread-safety: one thread per communicator (its replica's); abort() and the counters from any.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"
#include "parallel/host/host_clique.h"

namespace ls {

class HostCommunicator final : public DescribedCommunicator {
 public:
  HostCommunicator(std::shared_ptr<HostClique> clique, int rank, Device device);

  int rank() const override { return rank_; }
  int size() const override { return clique_->size(); }
  Device device() const override { return device_; }
  std::string backend() const override { return "host"; }

  // Calls inside a group are held and enqueued, in order, by the outermost group_end().
  void group_start() override { ++group_depth_; }
  void group_end() override;
  // Fails the whole clique with an "aborted" error; blocked and later collectives throw it.
  void abort() override;

  // For the watchdog: collectives this rank has issued and completed (a collective's sequence
  // number is the issued count right after the call), and the clique's failure ("" if none).
  int64_t issued() const { return clique_->issued(rank_); }
  int64_t completed() const { return clique_->completed(rank_); }
  std::string last_failure() const { return clique_->failure_message(); }
  const std::shared_ptr<HostClique>& clique() const { return clique_; }

 private:
  // Checks the arguments, numbers the collective and enqueues its one task.
  void issue(CollectiveDesc desc, Stream& stream) override;

  void enqueue(const CollectiveDesc& desc, Stream& stream);

  std::shared_ptr<HostClique> clique_;
  int rank_;
  Device device_;
  int group_depth_ = 0;
  struct Held {
    CollectiveDesc desc;
    Stream* stream;
  };
  std::vector<Held> held_;  // the open group's collectives, enqueued at its end
};

}  // namespace ls
