// Bad input found by a kernel where it cannot throw. A CUDA kernel that meets a value outside its
// valid range (a class label >= the number of classes) records the first one in its stream's
// DeviceFault (mapped host memory); the stream raises it as an ls::Error of kind usage at its
// next synchronize(), or check() once idle. Host kernels raise the same message directly, so both
// backends fail alike on bad input. Layout shared with device code: plain data only.
#pragma once

#include <cstdint>
#include <string>

namespace ls {

struct DeviceFault {
  int32_t raised = 0;          // set (atomically, first writer wins) by the kernel
  int32_t reserved = 0;
  const char* op = nullptr;    // string literals of the host program, passed to the kernel
  const char* what = nullptr;  // "label"
  const char* hint = nullptr;  // how to fix it
  int64_t index = 0;           // the row it was found in
  int64_t value = 0;
  int64_t limit = 0;           // valid values are [0, limit)
};

// "softmax_xent: label 12 in row 3 is outside [0, 10); <hint>"
std::string describe_out_of_range(const char* op, const char* what, int64_t index, int64_t value,
                                  int64_t limit, const char* hint);

}  // namespace ls
