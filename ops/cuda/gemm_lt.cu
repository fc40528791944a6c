// The CUDA kernel of ops/gemm_epilogue.h: one cublasLtMatmul, bf16 A and B, f32 accumulation
// (CUBLAS_COMPUTE_32F), D in f32 or bf16, the epilogue fused into the product's store.
//
// Note [cuBLASLt plans]
// A product's plan (descriptors and algorithm) is made at its first call, on its thread, and kept
// for that thread: each shape's algorithm is chosen once, by cuBLASLt's heuristic, and never
// again, so a run multiplies every shape with one algorithm from its first step to its last (and
// a captured graph replays the same one). The key is everything the heuristic sees: the shape,
// transposes, epilogue, D's type, and the alignment of each pointer (cuBLASLt assumes 256-byte
// alignment unless told less, and tensors cut from a larger one are aligned less). Each call runs
// in the stream's fixed workspace (ops/cuda/cublas_workspace.h), the deterministic route cuBLAS
// documents; no algorithm reduces with atomics.
//
// Note [Row-major products through cuBLASLt]
// As in ops/cuda/gemm.cu: the row-major D[m, n] = op(A) op(B) is the column-major D^T (n x m) =
// op(B)^T op(A)^T, so B is cuBLASLt's first operand and A its second. cuBLASLt's bias runs along
// D's column-major rows, which are our n columns, and the aux matrix has D's layout (ld n).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/core/runtime.h"
#include "ops/cuda/cublas_workspace.h"
#include "ops/cuda/cuda_launch.h"
#include "ops/gemm_epilogue.h"

namespace ls::cuda_ops {
namespace {

struct LtHandlePool {  // handles released by finished threads, per device
  std::mutex mutex;
  std::map<int, std::vector<cublasLtHandle_t>> free_handles;
};

LtHandlePool& lt_handle_pool() {
  static auto* pool = new LtHandlePool;  // never destroyed: threads may outlive static destructors
  return *pool;
}

struct PlanKey {
  int device;
  bool trans_a, trans_b;
  int64_t m, n, k;
  GemmEpilogue epilogue;
  bool d_bf16;
  uint32_t align_a, align_b, align_d, align_bias, align_aux;
  auto tie() const {
    return std::tie(device, trans_a, trans_b, m, n, k, epilogue, d_bf16, align_a, align_b, align_d,
                    align_bias, align_aux);
  }
  bool operator<(const PlanKey& other) const { return tie() < other.tie(); }
};

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

// The largest power of two up to 256 that divides the address (256 for null).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

cublasLtEpilogue_t lt_epilogue(GemmEpilogue epilogue) {
  switch (epilogue) {
    case GemmEpilogue::kNone:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case GemmEpilogue::kBias:
      return CUBLASLT_EPILOGUE_BIAS;
    case GemmEpilogue::kBiasGelu:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case GemmEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, const T& value) {
  LS_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}

template <typename T>
void set_preference(cublasLtMatmulPreference_t preference,
                    cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
  LS_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

class ThreadCublasLt {
 public:
  ThreadCublasLt() = default;
  ThreadCublasLt(const ThreadCublasLt&) = delete;
  ThreadCublasLt& operator=(const ThreadCublasLt&) = delete;
  ~ThreadCublasLt() {
    for (auto& [key, plan] : plans_) {  // host-side objects: destroying them waits for nothing
      cublasLtMatrixLayoutDestroy(plan.a);
      cublasLtMatrixLayoutDestroy(plan.b);
      cublasLtMatrixLayoutDestroy(plan.d);
      cublasLtMatmulDescDestroy(plan.desc);
    }
    std::lock_guard<std::mutex> lock(lt_handle_pool().mutex);
    for (auto& [device, handle] : handles_) lt_handle_pool().free_handles[device].push_back(handle);
  }

  cublasLtHandle_t handle(int device) {
    cublasLtHandle_t& handle = handles_[device];
    if (handle != nullptr) return handle;
    {
      std::lock_guard<std::mutex> lock(lt_handle_pool().mutex);
      std::vector<cublasLtHandle_t>& free_handles = lt_handle_pool().free_handles[device];
      if (!free_handles.empty()) {
        handle = free_handles.back();
        free_handles.pop_back();
        return handle;
      }
    }
    LS_CUBLAS_CHECK(cublasLtCreate(&handle));
    return handle;
  }

  // The plan for `key`, made (and its algorithm chosen) on first use; see Note [cuBLASLt plans].
  // bias and aux are the first call's pointers: the heuristic reads their alignment only.
  Plan& plan(const PlanKey& key, const void* bias, const void* aux, size_t workspace_bytes) {
    auto found = plans_.find(key);
    if (found != plans_.end()) return found->second;
    Plan plan;
    const cudaDataType d_type = key.d_bf16 ? CUDA_R_16BF : CUDA_R_32F;
    LS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // See Note [Row-major products through cuBLASLt]: cuBLASLt's A is our B and its B our A.
    const cublasOperation_t op_first = key.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_second = key.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, op_first);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, op_second);
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue(key.epilogue));
    if (detail::epilogue_has_bias(key.epilogue)) {
      set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    }
    if (detail::epilogue_has_aux(key.epilogue)) {
      set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, aux);
      set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, key.n);
    }
    // Column-major: the first operand is n x k (stored k x n when transposed), the second k x m.
    const int64_t ld_first = key.trans_b ? key.k : key.n;
    const int64_t ld_second = key.trans_a ? key.m : key.k;
    LS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.b, CUDA_R_16BF, key.trans_b ? key.k : key.n,
                                               key.trans_b ? key.n : key.k, ld_first));
    LS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.a, CUDA_R_16BF, key.trans_a ? key.m : key.k,
                                               key.trans_a ? key.k : key.m, ld_second));
    LS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan.d, d_type, key.n, key.m, key.n));

    cublasLtMatmulPreference_t preference = nullptr;
    LS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    set_preference(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                   static_cast<uint64_t>(workspace_bytes));
    set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
    set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
    set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_d);
    set_preference(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_d);
    cublasLtMatmulHeuristicResult_t result{};
    int found_count = 0;
    const cublasStatus_t status =
        cublasLtMatmulAlgoGetHeuristic(handle(key.device), plan.desc, plan.b, plan.a, plan.d,
                                       plan.d, preference, 1, &result, &found_count);
    cublasLtMatmulPreferenceDestroy(preference);
    LS_CHECK(
        status == CUBLAS_STATUS_SUCCESS && found_count > 0 && result.state == CUBLAS_STATUS_SUCCESS,
        "matmul_bf16_epilogue: cuBLASLt has no algorithm for ", key.m, "x", key.n, "x", key.k,
        key.trans_a ? " T" : " N", key.trans_b ? "T" : "N", " with epilogue ",
        gemm_epilogue_name(key.epilogue), " and a ", key.d_bf16 ? "bf16" : "f32", " output (",
        ::ls::detail::describe_cublas_status(status),
        "); use matmul_bf16 and the separate bias/GELU kernels for this shape");
    plan.algo = result.algo;
    return plans_.emplace(key, plan).first->second;
  }

 private:
  std::map<int, cublasLtHandle_t> handles_;
  std::map<PlanKey, Plan> plans_;
};

thread_local ThreadCublasLt t_cublas_lt;

void gemm_bf16_epilogue(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                        const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                        GemmEpilogue epilogue, const void* bias, uint16_t* aux, void* d,
                        bool d_bf16, Stream& on) {
  const CudaLaunch launch(on);
  if (m == 0 || n == 0) return;
  // The contiguous row-major tensors of the op: leading dimensions are the row lengths.
  LS_ASSERT(lda == (trans_a ? m : k) && ldb == (trans_b ? k : n),
            "matmul_bf16_epilogue: strided operands are not planned for");
  const CublasWorkspace workspace = cublas_workspace(launch.device(), launch.stream());
  const PlanKey key{launch.device(),
                    trans_a,
                    trans_b,
                    m,
                    n,
                    k,
                    epilogue,
                    d_bf16,
                    alignment_of(a),
                    alignment_of(b),
                    alignment_of(d),
                    alignment_of(bias),
                    alignment_of(aux)};
  Plan& plan = t_cublas_lt.plan(key, bias, aux, workspace.bytes);
  if (detail::epilogue_has_bias(epilogue)) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
  }
  if (detail::epilogue_has_aux(epilogue)) {
    set_desc(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux));
  }
  const float alpha = 1.0f, beta = 0.0f;
  // See Note [Row-major products through cuBLASLt].
  LS_CUBLAS_CHECK(cublasLtMatmul(t_cublas_lt.handle(launch.device()), plan.desc, &alpha, b, plan.b,
                                 a, plan.a, &beta, d, plan.d, d, plan.d, &plan.algo, workspace.data,
                                 workspace.bytes, launch.stream()));
}

}  // namespace

const GemmEpilogueOps kCudaGemmEpilogue{.gemm_bf16_epilogue = gemm_bf16_epilogue};
LS_REGISTER_OP_TABLE(GemmEpilogueOps, DeviceKind::kCuda, kCudaGemmEpilogue);

}  // namespace ls::cuda_ops
