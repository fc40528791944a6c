// CollectiveDesc: the one description of one collective call, as nccl-tests' `struct testColl`
// serves every collective. The argument checks, both communicators (host clique, NCCL), the
// flight recorder, the desync checker and the watchdog's report all pass this one struct around,
// print it with describe() (one format, below) and compare it with same_collective() (the
// fingerprint: everything but the buffers and the label).
// Plain data: copying it copies the label; the buffers are the caller's and never owned.
// Thread-safety: none needed (values); the functions are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <lockstep/dtype.h>

namespace ls {

enum class ReduceOp { kSum, kAvg, kMax };
std::string_view reduce_op_name(ReduceOp op);  // "sum"

enum class CollectiveKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce };
std::string_view collective_name(CollectiveKind kind);  // "all_reduce"

struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  DType dtype = DType::kF32;
  size_t count = 0;              // NCCL's count: per rank (recv_count, send_count, count)
  ReduceOp op = ReduceOp::kSum;  // kSum for all_gather and broadcast
  int root = -1;                 // broadcast's and reduce's root; -1 for the others
  int64_t seq = 0;               // 1 for a rank's first collective, 2 for the next; 0: unnumbered
  std::string label;             // what the buffer holds ("bucket 3", "loss"); may be empty
  const void* send = nullptr;    // the buffers, as passed (not part of the fingerprint)
  void* recv = nullptr;

  // One per collective, in NCCL's argument order (parallel/comm/communicator.h).
  static CollectiveDesc all_reduce(const void* send, void* recv, size_t count, DType dtype,
                                   ReduceOp op) {
    return {CollectiveKind::kAllReduce, dtype, count, op, -1, 0, {}, send, recv};
  }
  static CollectiveDesc reduce_scatter(const void* send, void* recv, size_t recv_count,
                                       DType dtype, ReduceOp op) {
    return {CollectiveKind::kReduceScatter, dtype, recv_count, op, -1, 0, {}, send, recv};
  }
  static CollectiveDesc all_gather(const void* send, void* recv, size_t send_count, DType dtype) {
    return {CollectiveKind::kAllGather, dtype, send_count, ReduceOp::kSum, -1, 0, {}, send, recv};
  }
  static CollectiveDesc broadcast(const void* send, void* recv, size_t count, DType dtype,
                                  int root) {
    return {CollectiveKind::kBroadcast, dtype, count, ReduceOp::kSum, root, 0, {}, send, recv};
  }
  static CollectiveDesc reduce(const void* send, void* recv, size_t count, DType dtype,
                               ReduceOp op, int root) {
    return {CollectiveKind::kReduce, dtype, count, op, root, 0, {}, send, recv};
  }

  // One rank's block in bytes (count elements of dtype).
  size_t bytes() const { return count * dtype_size(dtype); }
};

// The fingerprint comparison: whether a and b are the same collective (kind, dtype, count, op,
// root and sequence number), which every rank must issue alike. Buffers and label do not count.
bool same_collective(const CollectiveDesc& a, const CollectiveDesc& b);

// The one text form of a collective, used in every message and report:
//   <kind>[ #<seq>] ([<label>, ]<bytes>) [<dtype>, <count name>=<count>[, <op>][, root=<root>]]
//   "all_reduce #5 (bucket 3, 1.0 MiB) [f32, count=262144, sum]"
//   "reduce_scatter (4.0 KiB) [bf16, recv_count=2048, avg]",
//   "broadcast #1 (64 B) [f32, count=16, root=0]",
//   "reduce #9 (bucket 2, 256 B) [f32, count=64, sum, root=1]"
// The count is named as the call names it: recv_count (reduce_scatter), send_count (all_gather).
std::string describe(const CollectiveDesc& desc);

// "1.0 MiB", "512 B"
std::string format_bytes(double bytes);

// Tells the active step ledger (ops/op_ledger.h), if any, that a communicator of `ranks` ranks
// issues `desc` as the NCCL backend does it: one kernel that reads and writes the rank's buffer
// once (the ledger prices one device's step; bus traffic across GPUs is not in it), and for one
// rank a copy or nothing (Note [One rank needs no NCCL]). Backends call it from issue().
void record_collective_in_ledger(const CollectiveDesc& desc, int ranks);

}  // namespace ls
