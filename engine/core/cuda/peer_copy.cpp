// peer_copy_gbps() (see engine/core/system_info.h): lockstep-doctor's timed device-to-device copy,
// the figure to hold against the link between two GPUs (NVLink, or PCIe at its width and
// generation). Compiled, not run on a GPU yet (docs/gpu.md). A failing CUDA call leaves its
// buffers allocated: the doctor reports the failure and exits.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "engine/core/cuda/cuda_check.h"
#include "engine/core/system_info.h"

namespace ls {
namespace {

// Enables peer access from `device` to `peer` when the pair supports it; returns whether this
// call enabled it ("already enabled" is fine: someone else owns that mapping).
bool enable_peer_access(int device, int peer) {
  int can = 0;
  LS_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, peer));
  if (!can) return false;
  LS_CUDA_CHECK(cudaSetDevice(device));
  const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
  if (status == cudaErrorPeerAccessAlreadyEnabled) {
    (void)cudaGetLastError();
    return false;
  }
  LS_CUDA_CHECK(status);
  return true;
}

// Undoes what enable_peer_access did: a device has a limited number of peer mappings (8 on
// PCIe systems), and the doctor measures every pair in one process.
void disable_peer_access(int device, int peer) {
  LS_CUDA_CHECK(cudaSetDevice(device));
  LS_CUDA_CHECK(cudaDeviceDisablePeerAccess(peer));
}

}  // namespace

double peer_copy_gbps(int from, int to, int64_t bytes) {
  LS_CHECK(bytes > 0, "peer_copy_gbps: bytes must be positive, got ", bytes);
  const bool enabled_from = enable_peer_access(from, to);
  const bool enabled_to = enable_peer_access(to, from);
  void* src = nullptr;
  void* dst = nullptr;
  LS_CUDA_CHECK(cudaSetDevice(from));
  LS_CUDA_CHECK(cudaMalloc(&src, static_cast<size_t>(bytes)));
  LS_CUDA_CHECK(cudaSetDevice(to));
  LS_CUDA_CHECK(cudaMalloc(&dst, static_cast<size_t>(bytes)));
  cudaStream_t stream = nullptr;
  LS_CUDA_CHECK(cudaSetDevice(from));
  LS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t start = nullptr, stop = nullptr;
  LS_CUDA_CHECK(cudaEventCreate(&start));
  LS_CUDA_CHECK(cudaEventCreate(&stop));
  // One untimed copy first: the first transfer pays for mapping the peer's memory.
  LS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to, src, from, static_cast<size_t>(bytes), stream));
  std::vector<double> rates;
  for (int i = 0; i < 5; ++i) {
    LS_CUDA_CHECK(cudaEventRecord(start, stream));
    LS_CUDA_CHECK(cudaMemcpyPeerAsync(dst, to, src, from, static_cast<size_t>(bytes), stream));
    LS_CUDA_CHECK(cudaEventRecord(stop, stream));
    LS_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    LS_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    rates.push_back(static_cast<double>(bytes) / (static_cast<double>(ms) * 1e-3) / 1e9);
  }
  LS_CUDA_CHECK(cudaEventDestroy(start));
  LS_CUDA_CHECK(cudaEventDestroy(stop));
  LS_CUDA_CHECK(cudaStreamDestroy(stream));
  LS_CUDA_CHECK(cudaFree(src));
  LS_CUDA_CHECK(cudaSetDevice(to));
  LS_CUDA_CHECK(cudaFree(dst));
  if (enabled_from) disable_peer_access(from, to);
  if (enabled_to) disable_peer_access(to, from);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace ls
