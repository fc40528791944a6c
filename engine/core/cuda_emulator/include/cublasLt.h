// The cuBLASLt API of the CPU emulator (LOCKSTEP_CUDA=EMULATED): the calls ops/cuda/gemm_lt.cu
// makes, with cuBLASLt's names, values and column-major semantics, implemented on the host in
// engine/core/cuda_emulator/cublas_lt.cpp (16-bit operands widened to f32, which is exact, an f32
// product, then the epilogue in f32 and one rounding to D's type). The heuristic returns one
// algorithm, "the emulator's"; a call runs at once on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>

typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct cublasLtMatmulDescEmulated* cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutEmulated* cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceEmulated* cublasLtMatmulPreference_t;

typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
} cublasLtMatmulDescAttributes_t;

typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 164,
  CUBLASLT_EPILOGUE_DGELU = 192,
} cublasLtEpilogue_t;

typedef enum {
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t size);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* value, size_t size);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);
