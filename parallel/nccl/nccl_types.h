// lockstep's element types and reduce ops as NCCL's, and the words for NCCL results in messages
// (collectives are named by describe(), parallel/comm/collective.h). Only parallel/nccl/ includes
// this (it pulls in nccl.h). Collectives take f32 and bf16; any other dtype raises ls::Error before
// NCCL is called. ReduceOp::kAvg is ncclAvg (NCCL >= 2.10), which for floating types multiplies
// each input by 1/nranks in the data type and then sums (NVIDIA/nccl src/enqueue.cc,
// hostToDevRedOp), so it is exact when nranks is a power of two.
#pragma once

#include <nccl.h>

#include <cstddef>
#include <string>

#include <lockstep/dtype.h>
#include <lockstep/error.h>
#include "parallel/comm/collective.h"

namespace ls {

inline ncclDataType_t nccl_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    case DType::kI32: break;
  }
  LS_THROW("NCCL collectives take f32 or bf16 tensors, got ", dtype_name(dtype));
}

inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kAvg: return ncclAvg;
    case ReduceOp::kMax: return ncclMax;
  }
  LS_THROW("unknown ReduceOp ", static_cast<int>(op));
}

// "ncclInvalidUsage", for messages next to ncclGetErrorString's sentence.
inline const char* nccl_result_name(ncclResult_t result) {
  switch (static_cast<int>(result)) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclResult_t <unknown>";
  }
}

// NCCL's sentence for `result`, its name, and ncclGetLastError (kept process-wide by NCCL, so
// `comm` may be null).
inline std::string nccl_error_text(ncclResult_t result, ncclComm_t comm) {
  std::string text =
      detail::concat(ncclGetErrorString(result), " [", nccl_result_name(result), "]");
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') text += detail::concat("; NCCL's last error: ", last);
  return text;
}

}  // namespace ls
