// Argument checks every Communicator backend runs before it issues a collective, on the
// caller's thread: NCCL's rules (supported dtype, the rank's own stream, non-null buffers, in
// place only in NCCL's exact layout, root in range), each failure an ls::Error that says what
// was wrong and how to fix it. One copy, so the host and NCCL communicators agree exactly.
#pragma once

#include <lockstep/device.h>
#include <lockstep/stream.h>
#include "parallel/comm/collective.h"

namespace ls {

// Throws ls::Error when `desc` breaks a rule for rank `rank` of `size` ranks on `device`.
void check_collective(const CollectiveDesc& desc, int rank, int size, Device device,
                      const Stream& stream);

}  // namespace ls
