// The cuBLAS workspace of (calling thread, device, stream), for every cuBLAS and cuBLASLt call on
// that stream (ops/cuda/gemm.cu owns them; see its Note [cuBLAS handles and workspaces]). One
// fixed workspace per stream is what cuBLAS asks for bitwise-reproducible results, and calls on
// one stream run in order, so cuBLAS and cuBLASLt share it.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace ls::cuda_ops {

struct CublasWorkspace {
  void* data = nullptr;
  size_t bytes = 0;
};

// Taken from the device's caching allocator on first use; `device` must be current.
CublasWorkspace cublas_workspace(int device, cudaStream_t stream);

}  // namespace ls::cuda_ops
