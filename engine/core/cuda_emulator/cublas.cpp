// cuBLAS of the CPU emulator (declared in the shim's <cublas_v2.h>): column-major GEMMs through
// CBLAS (OpenBLAS), at once on the calling thread. Arguments are checked as cuBLAS checks them
// (CUBLAS_STATUS_INVALID_VALUE). 16-bit operands (CUDA_R_16F, CUDA_R_16BF) are widened to f32
// first, which is exact, so the product is the f32 GEMM of the rounded values with f32
// accumulation, as CUBLAS_COMPUTE_32F computes it (only the summation order may differ).
// The handle's stream, workspace and modes are kept and checked, not otherwise used.
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/cuda_emulator/runtime_state.h"

struct cublasContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
};

namespace {

bool dims_ok(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, int lda,
             int ldb, int ldc) {
  if (m < 0 || n < 0 || k < 0) return false;
  if (transa == CUBLAS_OP_C || transb == CUBLAS_OP_C) return false;  // real types only
  const int rows_a = transa == CUBLAS_OP_N ? m : k;
  const int rows_b = transb == CUBLAS_OP_N ? k : n;
  return lda >= std::max(1, rows_a) && ldb >= std::max(1, rows_b) && ldc >= std::max(1, m);
}

CBLAS_TRANSPOSE cblas_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

// Elements from the first to the last one a column-major operand of `rows` x `cols` reads.
int64_t span_of(int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  return static_cast<int64_t>(batch - 1) * stride + static_cast<int64_t>(cols - 1) * ld + rows;
}

// The operand as f32: itself, or a widened copy in `storage`.
const float* as_f32(const void* data, cudaDataType type, int64_t span,
                    std::vector<float>& storage) {
  if (type == CUDA_R_32F) return static_cast<const float*>(data);
  const auto* bits = static_cast<const uint16_t*>(data);
  storage.resize(static_cast<size_t>(span));
  for (int64_t i = 0; i < span; ++i) {
    storage[static_cast<size_t>(i)] =
        type == CUDA_R_16BF ? __bfloat162float(__ushort_as_bfloat16(bits[i]))
                            : __half2float(__ushort_as_half(bits[i]));
  }
  return storage.data();
}

bool type_ok(cudaDataType type) {
  return type == CUDA_R_32F || type == CUDA_R_16F || type == CUDA_R_16BF;
}

void sgemm(cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k, float alpha,
           const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  if (m == 0 || n == 0) return;
  cblas_sgemm(CblasColMajor, cblas_op(transa), cblas_op(transb), m, n, k, alpha, a, lda, b, ldb,
              beta, c, ldc);
}

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  int device = 0;
  if (ls::cuda_emu::detail::check_current_device(&device) != cudaSuccess)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasContext{device};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ls::cuda_emu::detail::stream_device(stream) != handle->device)
    return CUBLAS_STATUS_INVALID_VALUE;
  handle->stream = stream;
  handle->workspace = nullptr;  // as in cuBLAS: back to its own pool
  handle->workspace_bytes = 0;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace(cublasHandle_t handle, void* workspace, size_t bytes) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspace == nullptr && bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  handle->workspace = workspace;
  handle->workspace_bytes = bytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetAtomicsMode(cublasHandle_t handle, cublasAtomicsMode_t) {
  return handle == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  return mode == CUBLAS_POINTER_MODE_HOST ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_SUPPORTED;
}

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float* alpha,
                           const float* a, int lda, const float* b, int ldb, const float* beta,
                           float* c, int ldc) {
  return cublasSgemmStridedBatched(handle, transa, transb, m, n, k, alpha, a, lda, 0, b, ldb, 0,
                                   beta, c, ldc, 0, 1);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float* alpha, const float* a, int lda,
                                         long long stride_a, const float* b, int ldb,
                                         long long stride_b, const float* beta, float* c, int ldc,
                                         long long stride_c, int batch) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!dims_ok(transa, transb, m, n, k, lda, ldb, ldc) || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  ls::cuda_emu::note_library_launch();
  for (int i = 0; i < batch; ++i) {
    sgemm(transa, transb, m, n, k, *alpha, a + i * stride_a, lda, b + i * stride_b, ldb, *beta,
          c + i * stride_c, ldc);
  }
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* a, cudaDataType a_type, int lda, const void* b,
                            cudaDataType b_type, int ldb, const void* beta, void* c,
                            cudaDataType c_type, int ldc, cublasComputeType_t compute,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, a, a_type, lda, 0, b,
                                    b_type, ldb, 0, beta, c, c_type, ldc, 0, 1, compute, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* a, cudaDataType a_type, int lda, long long stride_a,
    const void* b, cudaDataType b_type, int ldb, long long stride_b, const void* beta, void* c,
    cudaDataType c_type, int ldc, long long stride_c, int batch, cublasComputeType_t compute,
    cublasGemmAlgo_t) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!dims_ok(transa, transb, m, n, k, lda, ldb, ldc) || batch < 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  ls::cuda_emu::note_library_launch();
  if (!type_ok(a_type) || !type_ok(b_type) || c_type != CUDA_R_32F ||
      compute != CUBLAS_COMPUTE_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
  std::vector<float> a_storage, b_storage;
  const float* a32 = as_f32(a, a_type,
                            span_of(transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m,
                                    lda, stride_a, batch),
                            a_storage);
  const float* b32 = as_f32(b, b_type,
                            span_of(transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k,
                                    ldb, stride_b, batch),
                            b_storage);
  const float alpha32 = *static_cast<const float*>(alpha);
  const float beta32 = *static_cast<const float*>(beta);
  auto* c32 = static_cast<float*>(c);
  for (int i = 0; i < batch; ++i) {
    sgemm(transa, transb, m, n, k, alpha32, a32 + i * stride_a, lda, b32 + i * stride_b, ldb,
          beta32, c32 + i * stride_c, ldc);
  }
  return CUBLAS_STATUS_SUCCESS;
}
