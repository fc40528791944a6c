// LS_CUDA_CHECK(stmt) and LS_CUBLAS_CHECK(stmt): run a CUDA runtime / cuBLAS call and raise
// ls::Error when it fails. The message names the statement, the error (name and text) and the
// calling thread's current device; ls::Error adds the thread's context (replica) and file:line.
// LS_NCCL_CHECK lives in engine/core/cuda/nccl_check.h so that only NCCL users include nccl.h.
// Header-only; safe to include from .cpp (g++) and .cu (nvcc) files.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include <lockstep/error.h>

namespace ls::detail {

// "cuda:N", the calling thread's current device, for error messages. Never throws.
inline std::string cuda_current_device_str() {
  int device = -1;
  if (cudaGetDevice(&device) != cudaSuccess) return "cuda:?";
  return "cuda:" + std::to_string(device);
}

// What to do about the errors of graph capture (900-908), which name a broken rule rather than a
// fault; "" for other errors. See Note [Events recorded during capture] (cuda_graph.h).
inline const char* capture_error_hint(cudaError_t status) {
  switch (status) {
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
      return ": something a graph capture forbids (a host wait or query on a capturing stream, "
             "an allocation outside the caching allocator, the legacy stream) happened while a "
             "step was being captured";
    case cudaErrorStreamCaptureUnjoined:
      return ": a stream joined to the capture was not joined back (the origin stream must wait "
             "on an event recorded on every joined stream before end_capture)";
    case cudaErrorStreamCaptureIsolation:
      return ": a capturing stream waited on an event recorded outside the capture; record the "
             "events a captured step waits on inside it";
    case cudaErrorCapturedEvent:
      return ": the event was last recorded while its stream was being captured into a graph, "
             "so it marks a point of the graph, not work that ran; query, synchronize and time "
             "only events recorded outside a capture";
    default: return "";
  }
}

// Also clears the thread's "last error": a failed call leaves it set even when the error is not
// sticky, and the next launch check (cudaGetLastError) would report it against an innocent kernel.
inline std::string describe_cuda_error(cudaError_t status) {
  (void)cudaGetLastError();
  return concat(cudaGetErrorName(status), " (", cudaGetErrorString(status), ") on ",
                cuda_current_device_str(), capture_error_hint(status));
}

// Our own table, so that messages stay readable whatever the cuBLAS version.
inline const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_<unknown>";
}

inline std::string describe_cublas_status(cublasStatus_t status) {
  return concat(cublas_status_name(status), " (status ", static_cast<int>(status), ") on ",
                cuda_current_device_str());
}

}  // namespace ls::detail

#define LS_CUDA_CHECK(stmt) \
  LS_API_CHECK("CUDA", stmt, cudaSuccess, ::ls::detail::describe_cuda_error)
#define LS_CUBLAS_CHECK(stmt) \
  LS_API_CHECK("cuBLAS", stmt, CUBLAS_STATUS_SUCCESS, ::ls::detail::describe_cublas_status)
