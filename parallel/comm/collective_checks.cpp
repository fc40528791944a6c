// check_collective (see parallel/comm/collective_checks.h).
#include "parallel/comm/collective_checks.h"

#include <cstdint>

#include <lockstep/error.h>

namespace ls {
namespace {

bool overlaps(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

const void* advance(const void* ptr, size_t bytes) {
  return reinterpret_cast<const void*>(reinterpret_cast<uintptr_t>(ptr) + bytes);
}

}  // namespace

void check_collective(const CollectiveDesc& c, int rank, int size, Device device,
                      const Stream& stream) {
  const char* name = collective_name(c.kind).data();  // the names are NUL-terminated literals
  LS_CHECK(c.dtype == DType::kF32 || c.dtype == DType::kBF16, name, ": dtype ",
           dtype_name(c.dtype), " is not supported by collectives; use f32 or bf16");
  LS_CHECK(stream.device() == device, name, " on rank ", rank, ": the stream belongs to ",
           stream.device().str(), " but this rank's device is ", device.str(),
           "; pass a stream of ", device.str());
  const size_t limit = SIZE_MAX / dtype_size(c.dtype) / static_cast<size_t>(size);
  LS_CHECK(c.count <= limit, name, ": count ", c.count, " is too large (at most ", limit, ")");
  const size_t block = c.count * dtype_size(c.dtype);
  const size_t all = block * static_cast<size_t>(size);
  const bool is_root = rank == c.root;
  if (c.kind == CollectiveKind::kBroadcast || c.kind == CollectiveKind::kReduce) {
    LS_CHECK(c.root >= 0 && c.root < size, name, ": root ", c.root,
             " is out of range; the clique has ", size, " ranks (0..", size - 1, ")");
  }
  // As in NCCL, a broadcast reads send on the root only and a reduce writes recv on the root only.
  const bool send_needed = c.kind != CollectiveKind::kBroadcast || is_root;
  const bool recv_needed = c.kind != CollectiveKind::kReduce || is_root;
  LS_CHECK(c.count == 0 || ((c.recv != nullptr || !recv_needed) &&
                            (c.send != nullptr || !send_needed)),
           name, " on rank ", rank, ": send (", c.send, ") and recv (", c.recv,
           ") must be non-null when count (", c.count,
           ") > 0 (a broadcast's send and a reduce's recv only on the root)");
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      LS_CHECK(!send_needed || !recv_needed || c.send == c.recv ||
                   !overlaps(c.send, block, c.recv, block),
               name,
               " on rank ", rank, ": send and recv overlap without being equal; pass "
               "send == recv for in place, or disjoint buffers");
      break;
    case CollectiveKind::kReduceScatter:
      LS_CHECK(c.recv == advance(c.send, static_cast<size_t>(rank) * block) ||
                   !overlaps(c.send, all, c.recv, block),
               "reduce_scatter on rank ", rank,
               ": recv overlaps send; in place means recv == send + ", rank,
               " * recv_count, otherwise the buffers must be disjoint");
      break;
    case CollectiveKind::kAllGather:
      LS_CHECK(c.send == advance(c.recv, static_cast<size_t>(rank) * block) ||
                   !overlaps(c.send, block, c.recv, all),
               "all_gather on rank ", rank, ": send overlaps recv; in place means send == recv + ",
               rank, " * send_count, otherwise the buffers must be disjoint");
      break;
  }
}

}  // namespace ls
