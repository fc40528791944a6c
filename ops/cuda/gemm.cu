// Row-major f32 GEMM on CUDA through cuBLAS (cublasSgemm, plain f32 math: no TF32, no atomics),
// asynchronous on the caller's stream: the CUDA kernel of ops/gemm.h.
//
// Note [Row-major GEMM through column-major cuBLAS]
// A row-major matrix with leading dimension ld is, read column-major, its transpose with the
// same ld. So C = op(A) op(B) (row-major, m x n) is computed as C^T = op(B)^T op(A)^T
// (column-major, n x m): cublasSgemm(op_b, op_a, n, m, k, B, ldb, A, lda, C, ldc), where op_x
// is T when trans_x, else N. No data moves.
//
// Note [cuBLAS handles and workspaces]
// One handle per (thread, device): handles are cheap to use but not to create, and sharing one
// across threads races on its stream setting. Each call binds the handle to the caller's stream
// and to a workspace owned by that (thread, device, stream), taken once from the device's
// caching allocator. A per-stream workspace is what cuBLAS asks for bitwise-reproducible
// results with several streams, and it keeps cuBLAS from allocating during the step. When a
// thread ends, its handles go to a process-wide pool for the next thread on that device (never
// cublasDestroy: it synchronizes the whole device, which can hang behind a stuck NCCL kernel)
// and its workspaces go back to the allocator. A stream must have finished its GEMMs before
// the thread that issued them exits or a new stream reuses its address.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "engine/core/runtime.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/gemm.h"

namespace ls::cuda_ops {
namespace {

struct HandlePool {  // handles released by finished threads, per device
  std::mutex mutex;
  std::map<int, std::vector<cublasHandle_t>> free_handles;
};

HandlePool& handle_pool() {
  static auto* pool = new HandlePool;  // never destroyed: threads may outlive static destructors
  return *pool;
}

struct DeviceCublas {
  cublasHandle_t handle = nullptr;
  size_t workspace_bytes = 0;
  std::map<cudaStream_t, void*> workspaces;
};

class ThreadCublas {
 public:
  ThreadCublas() = default;
  ThreadCublas(const ThreadCublas&) = delete;
  ThreadCublas& operator=(const ThreadCublas&) = delete;
  ~ThreadCublas() {
    for (auto& [device, state] : devices_) {
      try {
        CachingAllocator& allocator = device_runtime(Device{DeviceKind::kCuda, device}).allocator();
        for (auto& [stream, workspace] : state.workspaces) {
          if (workspace != nullptr) allocator.free(workspace);
        }
      } catch (...) {
        // Leaving the workspaces allocated is harmless; a destructor must not throw.
      }
      if (state.handle == nullptr) continue;
      std::lock_guard<std::mutex> lock(handle_pool().mutex);
      handle_pool().free_handles[device].push_back(state.handle);
    }
  }

  // The calling thread's handle for `device` (current), bound to `stream` and its workspace.
  cublasHandle_t bind(int device, cudaStream_t stream) {
    DeviceCublas& state = devices_[device];
    if (state.handle == nullptr) {
      state.handle = acquire_handle(device);
      state.workspace_bytes = workspace_bytes_for(device);
    }
    void*& workspace = state.workspaces[stream];
    if (workspace == nullptr) {
      workspace = device_runtime(Device{DeviceKind::kCuda, device})
                      .allocator()
                      .allocate(state.workspace_bytes);
    }
    // cublasSetStream resets the workspace to cuBLAS's own pool, so set ours after it.
    LS_CUBLAS_CHECK(cublasSetStream(state.handle, stream));
    LS_CUBLAS_CHECK(cublasSetWorkspace(state.handle, workspace, state.workspace_bytes));
    return state.handle;
  }

 private:
  static cublasHandle_t acquire_handle(int device) {
    {
      std::lock_guard<std::mutex> lock(handle_pool().mutex);
      std::vector<cublasHandle_t>& free_handles = handle_pool().free_handles[device];
      if (!free_handles.empty()) {
        cublasHandle_t handle = free_handles.back();
        free_handles.pop_back();
        return handle;
      }
    }
    cublasHandle_t handle = nullptr;
    LS_CUBLAS_CHECK(cublasCreate(&handle));
    LS_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));  // f32 stays f32 (no TF32)
    LS_CUBLAS_CHECK(cublasSetAtomicsMode(handle, CUBLAS_ATOMICS_NOT_ALLOWED));
    LS_CUBLAS_CHECK(cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_HOST));
    return handle;
  }

  // cuBLAS's recommendation for cublasSetWorkspace: 32 MiB on Hopper and newer, 4 MiB before.
  static size_t workspace_bytes_for(int device) {
    int major = 0;
    LS_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    return (major >= 9 ? 32u : 4u) << 20;
  }

  std::map<int, DeviceCublas> devices_;
};

thread_local ThreadCublas t_cublas;

// C_b = beta * C_b for the `batch` matrices C_b = c + b * stride_c: the whole result when
// k == 0 or alpha == 0 (A and B are then not read). beta == 0 writes zeros, so NaNs in C do not
// survive, as in BLAS and the host kernel.
__global__ void scale_matrix_kernel(float* c, int64_t rows, int64_t cols, int64_t ldc, float beta,
                                    int64_t batch, int64_t stride_c) {
  const int64_t per_matrix = rows * cols;
  LS_GRID_STRIDE_LOOP(i, batch * per_matrix) {
    const int64_t b = i / per_matrix, e = i % per_matrix;
    float& value = c[b * stride_c + (e / cols) * ldc + e % cols];
    value = beta == 0.0f ? 0.0f : beta * value;
  }
}

int checked_int(int64_t value, const char* name) {
  LS_CHECK(value >= 0 && value <= INT_MAX, "gemm: ", name, " = ", value,
           " is outside what cuBLAS takes (0 to ", INT_MAX, "); split the matrix");
  return static_cast<int>(value);
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  const int device = launch.device();
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.0f) {
    if (beta == 1.0f) return;
    scale_matrix_kernel<<<grid_for(m * n), kThreads, 0, stream>>>(c, m, n, ldc, beta, 1, 0);
    LS_CUDA_CHECK_LAUNCH();
    return;
  }
  // Leading dimensions of at least 1, as BLAS requires even when no element is read.
  const int ld_a = checked_int(std::max<int64_t>(lda, 1), "lda");
  const int ld_b = checked_int(std::max<int64_t>(ldb, 1), "ldb");
  const int ld_c = checked_int(std::max<int64_t>(ldc, 1), "ldc");
  const int rows = checked_int(m, "m");
  const int cols = checked_int(n, "n");
  const int inner = checked_int(k, "k");
  cublasHandle_t handle = t_cublas.bind(device, stream);
  // See Note [Row-major GEMM through column-major cuBLAS].
  LS_CUBLAS_CHECK(cublasSgemm(handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                              trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, cols, rows, inner, &alpha, b,
                              ld_b, a, ld_a, &beta, c, ld_c));
}

// See Note [Row-major GEMM through column-major cuBLAS]; the batch strides carry over unchanged.
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  const int device = launch.device();
  if (m == 0 || n == 0 || batch == 0) return;
  if (k == 0 || alpha == 0.0f) {
    if (beta == 1.0f) return;
    scale_matrix_kernel<<<grid_for(batch * m * n), kThreads, 0, stream>>>(c, m, n, ldc, beta, batch,
                                                                          stride_c);
    LS_CUDA_CHECK_LAUNCH();
    return;
  }
  const int ld_a = checked_int(std::max<int64_t>(lda, 1), "lda");
  const int ld_b = checked_int(std::max<int64_t>(ldb, 1), "ldb");
  const int ld_c = checked_int(std::max<int64_t>(ldc, 1), "ldc");
  const int rows = checked_int(m, "m");
  const int cols = checked_int(n, "n");
  const int inner = checked_int(k, "k");
  const int count = checked_int(batch, "batch");
  cublasHandle_t handle = t_cublas.bind(device, stream);
  LS_CUBLAS_CHECK(cublasSgemmStridedBatched(
      handle, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, cols, rows,
      inner, &alpha, b, ld_b, static_cast<long long>(stride_b), a, ld_a,
      static_cast<long long>(stride_a), &beta, c, ld_c, static_cast<long long>(stride_c), count));
}

const GemmOps kCudaGemm{
    .gemm = gemm,
    .gemm_strided_batched = gemm_strided_batched,
};
LS_REGISTER_OP_TABLE(GemmOps, DeviceKind::kCuda, kCudaGemm);

}  // namespace ls::cuda_ops
