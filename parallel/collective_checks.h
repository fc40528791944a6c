// Argument checks every Communicator backend runs before it issues a collective, on the
// caller's thread: NCCL's rules (supported dtype, the rank's own stream, non-null buffers, in
// place only in NCCL's exact layout, root in range), each failure an ls::Error that says what
// was wrong and how to fix it. One copy, so the host and NCCL communicators agree exactly.
#pragma once

#include <cstddef>

#include "parallel/communicator.h"

namespace ls {

struct CollectiveCall {
  CollectiveKind kind;
  const void* send;
  const void* recv;
  size_t count;  // NCCL's count: per rank (recv_count of reduce_scatter, send_count of all_gather)
  DType dtype;
  int root = 0;  // broadcast only
};

// Throws ls::Error when `call` breaks a rule for rank `rank` of `size` ranks on `device`.
void check_collective(const CollectiveCall& call, int rank, int size, Device device,
                      const Stream& stream);

}  // namespace ls
