// LS_NCCL_CHECK(stmt): run an NCCL call and raise ls::Error unless it returns ncclSuccess.
// The message names the statement, NCCL's error text and the calling thread's current device.
// Note: non-blocking communicators may return ncclInProgress, which this macro treats as a
// failure; code that expects it must test the status itself (see notes/nccl-in-one-process.md).
#pragma once

#include <nccl.h>

#include <string>

#include "engine/core/cuda/cuda_check.h"

namespace ls::detail {

inline std::string describe_nccl_result(ncclResult_t result) {
  return concat(ncclGetErrorString(result), " (ncclResult_t ", static_cast<int>(result), ") on ",
                cuda_current_device_str());
}

}  // namespace ls::detail

#define LS_NCCL_CHECK(stmt) \
  LS_API_CHECK("NCCL", stmt, ncclSuccess, ::ls::detail::describe_nccl_result)
