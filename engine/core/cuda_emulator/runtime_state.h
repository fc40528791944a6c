// What the CPU emulator's runtime (runtime.cpp) shares with its kernel executor (executor.cpp)
// and cuBLAS (cublas.cpp): the calling thread's last error and launch-failure text, the device
// count and current device, and the device of a stream handle. Internal to the emulator.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

namespace ls::cuda_emu::detail {

// Sets the thread's last error (unless `error` is cudaSuccess) and returns `error`.
cudaError_t fail(cudaError_t error);
// A failed launch: cudaErrorLaunchFailure, whose cudaGetErrorString is then `what`.
void fail_launch(std::string what);

int device_count();
// cudaSuccess when the thread's current device exists, else why not.
cudaError_t check_current_device(int* device);
// The device a stream was created on (the legacy stream: the current device); -1 when `stream`
// is not a live stream.
int stream_device(cudaStream_t stream);

}  // namespace ls::cuda_emu::detail
