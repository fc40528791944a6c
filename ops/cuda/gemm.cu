// Row-major f32 GEMM on CUDA through cuBLAS, asynchronous on the caller's stream: the CUDA
// kernel of ops/gemm.h. kF32: cublasSgemm, plain f32 math (no TF32, no atomics). kBF16 / kF16:
// 16-bit copies of A and B, then cublasGemmEx with f32 C (see Note [16-bit GEMM operands]).
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
//
// Note [16-bit GEMM operands]
// kBF16 / kF16 (lockstep/precision.h) round every element of A and B to nearest even into a
// 16-bit copy, and cublasGemmEx multiplies the copies with f32 accumulation
// (CUBLAS_COMPUTE_32F) into the f32 C: what the host emulates by rounding and an f32 GEMM. A copy
// keeps its source's layout: the whole span from the first element to the last one read, so the
// leading dimensions, the batch strides and the row-major trick carry over unchanged (padding
// between rows is converted too, and never read). bf16 rounds with the bit arithmetic of the
// host's f32_to_bf16 (lockstep/dtype.h), so both backends round alike, NaN included. The
// copies come from the device's caching allocator and are freed as soon as the GEMM is
// enqueued: the allocator hands a block out again only in stream order (lockstep/allocator.h:
// a step allocates on one stream per device), and in a graph capture they come from the graph's
// pool. Converting costs one read of f32 and one write of 16 bits per element, small beside the
// product for the shapes of a transformer.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "engine/core/runtime.h"
#include "ops/cuda/cublas_workspace.h"
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
    if (state.handle == nullptr) state.handle = acquire_handle(device);
    const CublasWorkspace space = workspace(device, stream);
    // cublasSetStream resets the workspace to cuBLAS's own pool, so set ours after it.
    LS_CUBLAS_CHECK(cublasSetStream(state.handle, stream));
    LS_CUBLAS_CHECK(cublasSetWorkspace(state.handle, space.data, space.bytes));
    return state.handle;
  }

  // The workspace of (this thread, device, stream), taken from the allocator on first use.
  CublasWorkspace workspace(int device, cudaStream_t stream) {
    DeviceCublas& state = devices_[device];
    if (state.workspace_bytes == 0) state.workspace_bytes = workspace_bytes_for(device);
    void*& workspace = state.workspaces[stream];
    if (workspace == nullptr) {
      workspace = device_runtime(Device{DeviceKind::kCuda, device})
                      .allocator()
                      .allocate(state.workspace_bytes);
    }
    return {workspace, state.workspace_bytes};
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

// out[i] = in[i] rounded to bf16 or f16 (nearest, ties to even), as 16-bit patterns.
__device__ uint16_t bf16_bits(float x) {  // f32_to_bf16 of lockstep/dtype.h
  uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

__global__ void round_operand_kernel(const float* in, uint16_t* out, int64_t n, bool bf16) {
  LS_GRID_STRIDE_LOOP(i, n) {
    out[i] = bf16 ? bf16_bits(in[i]) : __half_as_ushort(__float2half_rn(in[i]));
  }
}

// Elements from a matrix's first to its last: rows x cols with leading dimension ld, `batch`
// of them `stride` apart (the span its 16-bit copy covers; see Note [16-bit GEMM operands]).
int64_t operand_span(int64_t rows, int64_t cols, int64_t ld, int64_t stride, int64_t batch) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// The 16-bit copies of A and B for one GEMM call, in one block of the device's caching allocator
// (B's copy starts 16-byte aligned, as cuBLAS's tensor-core kernels prefer). The block is freed
// by the destructor, after the GEMM was enqueued; see Note [16-bit GEMM operands].
class HalfOperands {
 public:
  HalfOperands(int device, Precision precision, const float* a, int64_t span_a, const float* b,
               int64_t span_b, cudaStream_t stream)
      : allocator_(device_runtime(Device{DeviceKind::kCuda, device}).allocator()) {
    const int64_t b_offset = (span_a + 7) / 8 * 8;
    block_ = static_cast<uint16_t*>(
        allocator_.allocate(static_cast<size_t>(b_offset + span_b) * sizeof(uint16_t)));
    a_ = block_;
    b_ = block_ + b_offset;
    const bool bf16 = precision == Precision::kBF16;
    LS_LAUNCH(round_operand_kernel, grid_for(span_a), kThreads, 0, stream, a, block_, span_a, bf16);
    LS_CUDA_CHECK_LAUNCH();
    LS_LAUNCH(round_operand_kernel, grid_for(span_b), kThreads, 0, stream, b, block_ + b_offset,
              span_b, bf16);
    LS_CUDA_CHECK_LAUNCH();
  }
  ~HalfOperands() { allocator_.free(block_); }
  HalfOperands(const HalfOperands&) = delete;
  HalfOperands& operator=(const HalfOperands&) = delete;

  const uint16_t* a() const { return a_; }
  const uint16_t* b() const { return b_; }

 private:
  CachingAllocator& allocator_;
  uint16_t* block_ = nullptr;
  const uint16_t* a_ = nullptr;
  const uint16_t* b_ = nullptr;
};

cudaDataType cuda_type_of(Precision precision) {
  LS_CHECK(precision == Precision::kBF16 || precision == Precision::kF16, "gemm: precision ",
           precision_name(precision), " has no 16-bit cuBLAS type");
  return precision == Precision::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
}

int checked_int(int64_t value, const char* name) {
  LS_CHECK(value >= 0 && value <= INT_MAX, "gemm: ", name, " = ", value,
           " is outside what cuBLAS takes (0 to ", INT_MAX, "); split the matrix");
  return static_cast<int>(value);
}

// A row-major product's sizes as cuBLAS takes them (Note [Row-major GEMM through column-major
// cuBLAS] swaps A and B at the call): ints, each checked, and leading dimensions of at least 1,
// as BLAS requires even when no element is read.
struct CublasShape {
  CublasShape(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, int64_t lda,
              int64_t ldb, int64_t ldc)
      : ld_a(checked_int(std::max<int64_t>(lda, 1), "lda")),
        ld_b(checked_int(std::max<int64_t>(ldb, 1), "ldb")),
        ld_c(checked_int(std::max<int64_t>(ldc, 1), "ldc")),
        rows(checked_int(m, "m")),
        cols(checked_int(n, "n")),
        inner(checked_int(k, "k")),
        op_a(trans_a ? CUBLAS_OP_T : CUBLAS_OP_N),
        op_b(trans_b ? CUBLAS_OP_T : CUBLAS_OP_N) {}
  int ld_a, ld_b, ld_c, rows, cols, inner;
  cublasOperation_t op_a, op_b;
};

// The products that multiply nothing (k == 0 or alpha == 0) are C = beta * C, `batch` matrices
// stride_c apart: done here, returning true; false when there is a product to compute.
bool scale_only(int64_t m, int64_t n, int64_t k, float alpha, float beta, float* c, int64_t ldc,
                int64_t batch, int64_t stride_c, cudaStream_t stream) {
  if (k != 0 && alpha != 0.0f) return false;
  if (beta != 1.0f) {
    LS_LAUNCH(scale_matrix_kernel, grid_for(batch * m * n), kThreads, 0, stream, c, m, n, ldc, beta,
              batch, stride_c);
    LS_CUDA_CHECK_LAUNCH();
  }
  return true;
}

// The one 16-bit product: cublasGemmEx (or, batched, cublasGemmStridedBatchedEx) on operands of
// `type` with f32 C and f32 accumulation, for the rounded copies of f32 operands and for operands
// already in bf16 alike. m, n, k > 0. See Note [Row-major GEMM through column-major cuBLAS]: the
// batch strides carry over unchanged.
void gemm_16bit(cublasHandle_t handle, bool trans_a, bool trans_b, int64_t m, int64_t n,
                int64_t k, float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                const uint16_t* b, int64_t ldb, int64_t stride_b, cudaDataType type, float beta,
                float* c, int64_t ldc, int64_t stride_c, bool batched, int64_t batch) {
  const CublasShape s(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if (!batched) {
    LS_CUBLAS_CHECK(cublasGemmEx(handle, s.op_b, s.op_a, s.cols, s.rows, s.inner, &alpha, b, type,
                                 s.ld_b, a, type, s.ld_a, &beta, c, CUDA_R_32F, s.ld_c,
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  LS_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle, s.op_b, s.op_a, s.cols, s.rows, s.inner, &alpha, b, type, s.ld_b,
      static_cast<long long>(stride_b), a, type, s.ld_a, static_cast<long long>(stride_a), &beta,
      c, CUDA_R_32F, s.ld_c, static_cast<long long>(stride_c), checked_int(batch, "batch"),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc,
          Precision precision, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  const int device = launch.device();
  if (m == 0 || n == 0) return;
  if (scale_only(m, n, k, alpha, beta, c, ldc, 1, 0, stream)) return;
  const CublasShape s(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  cublasHandle_t handle = t_cublas.bind(device, stream);
  // See Note [Row-major GEMM through column-major cuBLAS].
  if (precision == Precision::kF32) {
    LS_CUBLAS_CHECK(cublasSgemm(handle, s.op_b, s.op_a, s.cols, s.rows, s.inner, &alpha, b, s.ld_b,
                                a, s.ld_a, &beta, c, s.ld_c));
    return;
  }
  // See Note [16-bit GEMM operands]. Stored, A is m x k (k x m transposed); B is k x n (n x k).
  const HalfOperands half(device, precision, a,
                          operand_span(trans_a ? k : m, trans_a ? m : k, s.ld_a, 0, 1), b,
                          operand_span(trans_b ? n : k, trans_b ? k : n, s.ld_b, 0, 1), stream);
  gemm_16bit(handle, trans_a, trans_b, m, n, k, alpha, half.a(), lda, 0, half.b(), ldb, 0,
             cuda_type_of(precision), beta, c, ldc, 0, false, 1);
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                          const float* a, int64_t lda, int64_t stride_a, const float* b,
                          int64_t ldb, int64_t stride_b, float beta, float* c, int64_t ldc,
                          int64_t stride_c, int64_t batch, Precision precision, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  const int device = launch.device();
  if (m == 0 || n == 0 || batch == 0) return;
  if (scale_only(m, n, k, alpha, beta, c, ldc, batch, stride_c, stream)) return;
  const CublasShape s(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  const int count = checked_int(batch, "batch");
  cublasHandle_t handle = t_cublas.bind(device, stream);
  // See Note [Row-major GEMM through column-major cuBLAS]; the batch strides carry over unchanged.
  if (precision == Precision::kF32) {
    LS_CUBLAS_CHECK(cublasSgemmStridedBatched(
        handle, s.op_b, s.op_a, s.cols, s.rows, s.inner, &alpha, b, s.ld_b,
        static_cast<long long>(stride_b), a, s.ld_a, static_cast<long long>(stride_a), &beta, c,
        s.ld_c, static_cast<long long>(stride_c), count));
    return;
  }
  // See Note [16-bit GEMM operands]: the copies keep the batch strides.
  const HalfOperands half(
      device, precision, a,
      operand_span(trans_a ? k : m, trans_a ? m : k, s.ld_a, stride_a, batch), b,
      operand_span(trans_b ? n : k, trans_b ? k : n, s.ld_b, stride_b, batch), stream);
  gemm_16bit(handle, trans_a, trans_b, m, n, k, alpha, half.a(), lda, stride_a, half.b(), ldb,
             stride_b, cuda_type_of(precision), beta, c, ldc, stride_c, true, batch);
}

// Operands already in bf16: the 16-bit product on them directly, as gemm does on its copies.
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta,
               float* c, int64_t ldc, Stream& on) {
  const CudaLaunch launch(on);
  if (m == 0 || n == 0) return;
  if (scale_only(m, n, k, alpha, beta, c, ldc, 1, 0, launch.stream())) return;
  gemm_16bit(t_cublas.bind(launch.device(), launch.stream()), trans_a, trans_b, m, n, k, alpha, a,
             lda, 0, b, ldb, 0, CUDA_R_16BF, beta, c, ldc, 0, false, 1);
}

// The batched form of gemm_bf16.
void gemm_strided_batched_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                               float alpha, const uint16_t* a, int64_t lda, int64_t stride_a,
                               const uint16_t* b, int64_t ldb, int64_t stride_b, float beta,
                               float* c, int64_t ldc, int64_t stride_c, int64_t batch,
                               Stream& on) {
  const CudaLaunch launch(on);
  if (m == 0 || n == 0 || batch == 0) return;
  if (scale_only(m, n, k, alpha, beta, c, ldc, batch, stride_c, launch.stream())) return;
  gemm_16bit(t_cublas.bind(launch.device(), launch.stream()), trans_a, trans_b, m, n, k, alpha, a,
             lda, stride_a, b, ldb, stride_b, CUDA_R_16BF, beta, c, ldc, stride_c, true, batch);
}

CublasWorkspace cublas_workspace(int device, cudaStream_t stream) {
  return t_cublas.workspace(device, stream);
}

const GemmOps kCudaGemm{
    .gemm = gemm,
    .gemm_strided_batched = gemm_strided_batched,
    .gemm_bf16 = gemm_bf16,
    .gemm_strided_batched_bf16 = gemm_strided_batched_bf16,
};
LS_REGISTER_OP_TABLE(GemmOps, DeviceKind::kCuda, kCudaGemm);

}  // namespace ls::cuda_ops
