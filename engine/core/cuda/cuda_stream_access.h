// Access to the CUDA handles behind the backend-neutral Stream and Event, for kernel launchers
// and NCCL. Both raise ls::Error when given a stream or event of another backend, and
// cuda_stream_of raises "stream aborted" once the stream was aborted, so no new work is
// enqueued on it (see Stream::abort in lockstep/stream.h).
#pragma once

#include <cuda_runtime_api.h>

#include "engine/core/device_fault.h"
#include <lockstep/stream.h>

namespace ls {

cudaStream_t cuda_stream_of(Stream& stream);
cudaEvent_t cuda_event_of(const Event& event);
// The stream's fault record, which its kernels may write (engine/core/device_fault.h).
DeviceFault* cuda_fault_of(Stream& stream);

}  // namespace ls
