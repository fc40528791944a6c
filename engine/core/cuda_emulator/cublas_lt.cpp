// cuBLASLt of the CPU emulator (declared in the shim's <cublasLt.h>): cublasLtMatmul on
// column-major operands through CBLAS, at once on the calling thread, with the epilogues
// ops/cuda/gemm_lt.cu asks for. Arguments are checked as cuBLASLt checks them
// (CUBLAS_STATUS_INVALID_VALUE, CUBLAS_STATUS_NOT_SUPPORTED): types, layouts that fit the
// operation, an aux leading dimension that is a multiple of 8 and covers D's rows, pointers the
// epilogue needs, pointers at least as aligned as the preference promised, and a workspace no
// smaller than the heuristic's answer. bf16 operands are widened to f32 (exact); the f32 product
// takes the epilogue in f32 (GELU's tanh form, as cuBLASLt computes it) and is rounded once to D's
// type, and aux once to bf16.
#include <cblas.h>
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/cuda_emulator/runtime_state.h"

struct cublasLtContext {
  int device = 0;
};

struct cublasLtMatmulDescEmulated {
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  cublasOperation_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

struct cublasLtMatrixLayoutEmulated {
  cudaDataType type;
  uint64_t rows, cols;
  int64_t ld;
};

struct cublasLtMatmulPreferenceEmulated {
  uint64_t max_workspace = 0;
  uint32_t min_alignment[4] = {256, 256, 256, 256};  // A, B, C, D
};

namespace {

template <typename T>
bool read_value(const void* value, size_t size, T* out) {
  if (value == nullptr || size != sizeof(T)) return false;
  std::memcpy(out, value, sizeof(T));
  return true;
}

bool has_bias(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
}
bool has_aux(cublasLtEpilogue_t e) {
  return e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS || e == CUBLASLT_EPILOGUE_DGELU;
}

bool aligned(const void* p, uint32_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

float widen(const void* data, cudaDataType type, int64_t i) {
  if (type == CUDA_R_32F) return static_cast<const float*>(data)[i];
  return __bfloat162float(__ushort_as_bfloat16(static_cast<const uint16_t*>(data)[i]));
}

uint16_t bf16_bits(float x) { return __bfloat16_as_ushort(__float2bfloat16(x)); }

// A column-major operand as f32, whole span.
std::vector<float> widened(const void* data, const cublasLtMatrixLayoutEmulated& layout) {
  const int64_t span =
      static_cast<int64_t>(layout.cols - 1) * layout.ld + static_cast<int64_t>(layout.rows);
  std::vector<float> out(static_cast<size_t>(span));
  for (int64_t i = 0; i < span; ++i) out[static_cast<size_t>(i)] = widen(data, layout.type, i);
  return out;
}

// GELU's tanh form and its derivative, in f32.
constexpr float kGeluS = 0.7978845608028654f;
constexpr float kGeluA = 0.044715f;
float gelu(float x) { return 0.5f * x * (1.0f + std::tanh(kGeluS * (x + kGeluA * x * x * x))); }
float gelu_grad(float x) {
  const float t = std::tanh(kGeluS * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluS * (1.0f + 3.0f * kGeluA * x * x);
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  int device = 0;
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (ls::cuda_emu::detail::check_current_device(&device) != cudaSuccess)
    return CUBLAS_STATUS_NOT_INITIALIZED;
  *handle = new cublasLtContext{device};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute,
                                        cudaDataType_t scale_type) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *desc = new cublasLtMatmulDescEmulated{compute, scale_type};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t size) {
  if (desc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  bool ok = false;
  switch (attribute) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      ok = read_value(value, size, &desc->trans_a);
      break;
    case CUBLASLT_MATMUL_DESC_TRANSB:
      ok = read_value(value, size, &desc->trans_b);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      ok = read_value(value, size, &desc->epilogue);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      ok = read_value(value, size, &desc->bias);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
      ok = read_value(value, size, &desc->aux);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
      ok = read_value(value, size, &desc->aux_ld);
      break;
  }
  return ok ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
  if (layout == nullptr || ld < static_cast<int64_t>(rows) || ld < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutEmulated{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *preference = new cublasLtMatmulPreferenceEmulated;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  delete preference;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void* value, size_t size) {
  if (preference == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (attribute == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    return read_value(value, size, &preference->max_workspace) ? CUBLAS_STATUS_SUCCESS
                                                               : CUBLAS_STATUS_INVALID_VALUE;
  }
  const int index = static_cast<int>(attribute) - CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
  if (index < 0 || index > 3) return CUBLAS_STATUS_INVALID_VALUE;
  uint32_t alignment = 0;
  if (!read_value(value, size, &alignment) || alignment == 0 || (alignment & (alignment - 1)) != 0)
    return CUBLAS_STATUS_INVALID_VALUE;
  preference->min_alignment[index] = alignment;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// What both the heuristic and the matmul check: the types and shapes of the operation.
cublasStatus_t check_operation(const cublasLtMatmulDescEmulated& desc,
                               const cublasLtMatrixLayoutEmulated& a,
                               const cublasLtMatrixLayoutEmulated& b,
                               const cublasLtMatrixLayoutEmulated& c,
                               const cublasLtMatrixLayoutEmulated& d) {
  if (desc.compute != CUBLAS_COMPUTE_32F || desc.scale_type != CUDA_R_32F)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (a.type != CUDA_R_16BF || b.type != CUDA_R_16BF ||
      (d.type != CUDA_R_16BF && d.type != CUDA_R_32F) || c.type != d.type)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (desc.trans_a == CUBLAS_OP_C || desc.trans_b == CUBLAS_OP_C)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const uint64_t m = desc.trans_a == CUBLAS_OP_N ? a.rows : a.cols;
  const uint64_t k = desc.trans_a == CUBLAS_OP_N ? a.cols : a.rows;
  const uint64_t kb = desc.trans_b == CUBLAS_OP_N ? b.rows : b.cols;
  const uint64_t n = desc.trans_b == CUBLAS_OP_N ? b.cols : b.rows;
  if (k != kb || k == 0 || d.rows != m || d.cols != n || c.rows != m || c.cols != n)
    return CUBLAS_STATUS_INVALID_VALUE;
  switch (desc.epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT:
    case CUBLASLT_EPILOGUE_BIAS:
      break;
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    case CUBLASLT_EPILOGUE_DGELU:
      if (d.type != CUDA_R_16BF) return CUBLAS_STATUS_NOT_SUPPORTED;  // aux takes D's type
      if (desc.aux_ld % 8 != 0 || desc.aux_ld < static_cast<int64_t>(d.rows))
        return CUBLAS_STATUS_INVALID_VALUE;
      break;
    default:
      return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a_desc,
    cublasLtMatrixLayout_t b_desc, cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int* returned) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requested <= 0 || desc == nullptr || a_desc == nullptr || b_desc == nullptr ||
      c_desc == nullptr || d_desc == nullptr || preference == nullptr || results == nullptr ||
      returned == nullptr)
    return CUBLAS_STATUS_INVALID_VALUE;
  *returned = 0;
  const cublasStatus_t status = check_operation(*desc, *a_desc, *b_desc, *c_desc, *d_desc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  results[0] = cublasLtMatmulHeuristicResult_t{};
  // The one algorithm remembers the alignments it was chosen for; the matmul checks them.
  for (int i = 0; i < 4; ++i) results[0].algo.data[i] = preference->min_alignment[i];
  results[0].algo.data[7] = 0x656d75;  // "emu": marks an algorithm this heuristic returned
  results[0].workspaceSize = 0;
  results[0].state = CUBLAS_STATUS_SUCCESS;
  results[0].wavesCount = 1.0f;
  *returned = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                              const void* a, cublasLtMatrixLayout_t a_desc, const void* b,
                              cublasLtMatrixLayout_t b_desc, const void* beta, const void* c,
                              cublasLtMatrixLayout_t c_desc, void* d, cublasLtMatrixLayout_t d_desc,
                              const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  if (handle == nullptr) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (desc == nullptr || a_desc == nullptr || b_desc == nullptr || c_desc == nullptr ||
      d_desc == nullptr || algo == nullptr || alpha == nullptr || beta == nullptr ||
      algo->data[7] != 0x656d75)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (ls::cuda_emu::detail::stream_device(stream) != handle->device)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (workspace == nullptr && workspace_bytes != 0) return CUBLAS_STATUS_INVALID_VALUE;
  const cublasStatus_t status = check_operation(*desc, *a_desc, *b_desc, *c_desc, *d_desc);
  if (status != CUBLAS_STATUS_SUCCESS) return status;
  if (!aligned(a, static_cast<uint32_t>(algo->data[0])) ||
      !aligned(b, static_cast<uint32_t>(algo->data[1])) ||
      !aligned(c, static_cast<uint32_t>(algo->data[2])) ||
      !aligned(d, static_cast<uint32_t>(algo->data[3])))
    return CUBLAS_STATUS_INVALID_VALUE;  // less aligned than the algorithm was chosen for
  const cublasLtEpilogue_t epilogue = desc->epilogue;
  if ((has_bias(epilogue) && desc->bias == nullptr) || (has_aux(epilogue) && desc->aux == nullptr))
    return CUBLAS_STATUS_INVALID_VALUE;
  ls::cuda_emu::note_library_launch();

  const int m = static_cast<int>(d_desc->rows), n = static_cast<int>(d_desc->cols);
  const int k = static_cast<int>(desc->trans_a == CUBLAS_OP_N ? a_desc->cols : a_desc->rows);
  const std::vector<float> a32 = widened(a, *a_desc), b32 = widened(b, *b_desc);
  std::vector<float> product(static_cast<size_t>(m) * static_cast<size_t>(n));
  const float alpha32 = *static_cast<const float*>(alpha);
  cblas_sgemm(CblasColMajor, desc->trans_a == CUBLAS_OP_N ? CblasNoTrans : CblasTrans,
              desc->trans_b == CUBLAS_OP_N ? CblasNoTrans : CblasTrans, m, n, k, alpha32,
              a32.data(), static_cast<int>(a_desc->ld), b32.data(), static_cast<int>(b_desc->ld),
              0.0f, product.data(), m);
  const float beta32 = *static_cast<const float*>(beta);
  const bool d_bf16 = d_desc->type == CUDA_R_16BF;
  auto* aux = static_cast<uint16_t*>(desc->aux);
  for (int col = 0; col < n; ++col) {
    for (int row = 0; row < m; ++row) {
      float v = product[static_cast<size_t>(col) * m + row];
      if (beta32 != 0.0f) v += beta32 * widen(c, c_desc->type, int64_t{col} * c_desc->ld + row);
      if (has_bias(epilogue)) v += widen(desc->bias, d_desc->type, row);
      const int64_t aux_at = int64_t{col} * desc->aux_ld + row;
      if (epilogue == CUBLASLT_EPILOGUE_GELU_AUX_BIAS) {
        aux[aux_at] = bf16_bits(v);
        v = gelu(v);
      } else if (epilogue == CUBLASLT_EPILOGUE_DGELU) {
        v *= gelu_grad(__bfloat162float(__ushort_as_bfloat16(aux[aux_at])));
      }
      const int64_t at = int64_t{col} * d_desc->ld + row;
      if (d_bf16) {
        static_cast<uint16_t*>(d)[at] = bf16_bits(v);
      } else {
        static_cast<float*>(d)[at] = v;
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
