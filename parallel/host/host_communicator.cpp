// The host Communicator (see parallel/host/host_communicator.h) and make_host_communicators.
// Argument checks run on the caller's thread; the collective itself runs as one task on the
// caller's stream: arrive, work, exit barrier. Rank r writes only its own recv buffer, except in
// all_reduce, where it writes chunk r of every rank's recv and nothing else.
// See Note [Host all-reduce in place] and Note [Host collective phases].
#include "parallel/host/host_communicator.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "parallel/comm/collective_checks.h"
#include "parallel/host/host_reduce.h"

namespace ls {
namespace {

// Note [Host all-reduce in place]
// all_reduce splits the count into size() near-equal chunks, and runs in one phase: rank r
// reduces chunk r of every rank's send, in rank order 0..N-1, and writes the result into chunk r
// of EVERY rank's recv. Exit barrier. (A two-phase version, reduce into the own recv, barrier,
// then copy the peers' chunks, moves 1.5x the memory and waits at one more barrier.)
// Why this is race-free even when send == recv on some or all ranks:
// - Chunk r of any buffer is touched by rank r only: read (its inputs) and written (the outputs)
//   by rank r alone, so the ranks never race each other.
// - Within rank r, each tile of chunk r is read from every input before it is written to any
//   output (host_reduce_to_all), so an output that is also an input is fine.
// - The exit barrier keeps every rank (and so its caller, who may reuse the buffers) inside the
//   collective until no peer reads or writes its memory any more.
// The other collectives keep a simpler rule: reduce_scatter (rank r reduces block r into its
// recv = send + r * count in place), all_gather (rank r writes blocks k != r of its recv, reading
// block k = send of rank k) and broadcast (the root's recv == send is not copied) follow the same
// rule: a rank writes only its own recv, and never a block that a peer reads in the same phase.

struct ChunkRange {
  size_t begin;
  size_t count;
};

// Chunk k of `count` split in n near-equal parts (the first count % n chunks one longer).
ChunkRange chunk_of(size_t count, int n, int k) {
  const size_t base = count / static_cast<size_t>(n);
  const size_t extra = count % static_cast<size_t>(n);
  const auto uk = static_cast<size_t>(k);
  return {uk * base + std::min(uk, extra), base + (uk < extra ? 1 : 0)};
}

char* bytes_of(void* ptr) { return static_cast<char*>(ptr); }

void run_all_reduce(HostClique& clique, int rank, const CollectiveDesc& desc) {
  const int n = clique.size();
  if (n == 1 && desc.send == desc.recv) return;  // one rank in place: sum, avg and max are identity
  const ChunkRange mine = chunk_of(desc.count, n, rank);
  const size_t at = mine.begin * dtype_size(desc.dtype);
  const void** inputs = clique.scratch(rank);
  for (int k = 0; k < n; ++k) inputs[k] = clique.peer(k).send;
  thread_local std::vector<void*> outputs;  // reused: a collective allocates nothing
  outputs.resize(static_cast<size_t>(n));
  for (int k = 0; k < n; ++k) outputs[static_cast<size_t>(k)] = bytes_of(clique.peer(k).recv) + at;
  host_reduce_to_all(inputs, n, outputs.data(), n, mine.begin, mine.count, desc.dtype, desc.op);
}

void run_reduce_scatter(HostClique& clique, int rank, const CollectiveDesc& desc) {
  const int n = clique.size();
  const void** inputs = clique.scratch(rank);
  for (int k = 0; k < n; ++k) inputs[k] = clique.peer(k).send;
  host_reduce(inputs, n, static_cast<size_t>(rank) * desc.count, desc.recv, desc.count, desc.dtype,
              desc.op);
}

void run_all_gather(HostClique& clique, int rank, const CollectiveDesc& desc) {
  const size_t block = desc.count * dtype_size(desc.dtype);
  for (int k = 0; k < clique.size(); ++k) {
    host_copy(bytes_of(desc.recv) + static_cast<size_t>(k) * block, clique.peer(k).send, block);
  }
}

// Every rank reduces its chunk of the count (rank order 0..N-1, as all_reduce: the same bits)
// into the root's recv, so the work is shared as in all_reduce; chunk r of the root's recv is
// written by rank r only (See Note [Host all-reduce in place]).
void run_reduce(HostClique& clique, int rank, const CollectiveDesc& desc) {
  const int n = clique.size();
  const ChunkRange mine = chunk_of(desc.count, n, rank);
  const void** inputs = clique.scratch(rank);
  for (int k = 0; k < n; ++k) inputs[k] = clique.peer(k).send;
  void* root_recv = bytes_of(clique.peer(desc.root).recv) + mine.begin * dtype_size(desc.dtype);
  host_reduce_to_all(inputs, n, &root_recv, 1, mine.begin, mine.count, desc.dtype, desc.op);
}

void run_broadcast(HostClique& clique, int rank, const CollectiveDesc& desc) {
  host_copy(desc.recv, clique.peer(desc.root).send, desc.count * dtype_size(desc.dtype));
}

// The one task a collective enqueues. See Note [Host collective phases].
void run_collective(HostClique& clique, int rank, const CollectiveDesc& desc) {
  clique.arrive(rank, desc);
  if (desc.count > 0) {
    switch (desc.kind) {
      case CollectiveKind::kAllReduce: run_all_reduce(clique, rank, desc); break;
      case CollectiveKind::kReduceScatter: run_reduce_scatter(clique, rank, desc); break;
      case CollectiveKind::kAllGather: run_all_gather(clique, rank, desc); break;
      case CollectiveKind::kBroadcast: run_broadcast(clique, rank, desc); break;
      case CollectiveKind::kReduce: run_reduce(clique, rank, desc); break;
    }
  }
  clique.depart(rank, desc);
}

}  // namespace

HostCommunicator::HostCommunicator(std::shared_ptr<HostClique> clique, int rank, Device device)
    : clique_(std::move(clique)), rank_(rank), device_(device) {}

void HostCommunicator::issue(CollectiveDesc desc, Stream& stream) {
  check_collective(desc, rank_, size(), device_, stream);
  record_collective_in_ledger(desc, size());
  clique_->throw_if_failed();  // sticky: a failed clique never starts another collective
  desc.seq = clique_->note_issued(rank_);
  if (group_depth_ > 0) {
    held_.push_back({std::move(desc), &stream});
    return;
  }
  enqueue(desc, stream);
}

void HostCommunicator::enqueue(const CollectiveDesc& desc, Stream& stream) {
  host_enqueue(stream,
               [clique = clique_, rank = rank_, desc] { run_collective(*clique, rank, desc); });
}

void HostCommunicator::group_end() {
  LS_CHECK(group_depth_ > 0, "group_end() on rank ", rank_,
           " without a matching group_start(); calls to group_start()/group_end() must balance");
  if (--group_depth_ > 0) return;
  std::vector<Held> held;
  held.swap(held_);
  // A clique that failed inside the group launches nothing more (NCCL: an aborted group).
  clique_->throw_if_failed();
  for (const Held& h : held) enqueue(h.desc, *h.stream);
}

void HostCommunicator::abort() {
  clique_->fail(
      "collective aborted: abort() was called on the communicator of rank " + std::to_string(rank_),
      ErrorKind::kAborted, __FILE__, __LINE__);
}

std::vector<std::unique_ptr<Communicator>> make_host_communicators(
    const std::vector<Device>& devices, const CommunicatorOptions& options) {
  check_clique_devices(devices, options, "make_host_communicators", DeviceKind::kHost);
  auto clique = std::make_shared<HostClique>(static_cast<int>(devices.size()), options.timeout);
  std::vector<std::unique_ptr<Communicator>> comms;
  for (size_t r = 0; r < devices.size(); ++r) {
    comms.push_back(std::make_unique<HostCommunicator>(clique, static_cast<int>(r), devices[r]));
  }
  return comms;
}

}  // namespace ls
