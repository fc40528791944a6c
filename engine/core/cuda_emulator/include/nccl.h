// The little of NCCL that engine/core/cuda/gpu_report.cpp asks for, in the CPU emulator
// (LOCKSTEP_CUDA=EMULATED). NCCL itself is not emulated: an emulated build uses
// parallel/nccl/without_nccl.cpp, and ncclGetVersion answers ncclInvalidUsage (no NCCL).
#pragma once

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};

inline ncclResult_t ncclGetVersion(int* version) {
  if (version != nullptr) *version = 0;
  return ncclInvalidUsage;
}

inline const char* ncclGetErrorString(ncclResult_t result) {
  return result == ncclSuccess ? "no error" : "NCCL is not part of the CUDA emulator";
}
