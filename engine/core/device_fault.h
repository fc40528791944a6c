// Bad input found by a kernel where it cannot throw. A CUDA kernel that meets a value outside its
// valid range (a class label >= the number of classes) records the first one in its stream's
// DeviceFault (mapped host memory); the stream raises it as an ls::Error of kind usage at its
// next synchronize(), or check() once idle. Host kernels raise the same message directly, so both
// backends fail alike on bad input. Layout shared with device code: plain data only.
//
// Note [No host pointers through the fault record]
// A string literal written in device code is an address in the GPU's memory: the host cannot read
// it (the first GPU run crashed exactly so, in describe_out_of_range). So the record holds only
// numbers: the kernel reports a fault SITE, an integer the host code of the op registered once
// (register_fault_site, at static initialisation) with the op's name, what was out of range and
// the hint; the host turns the site back into text.
#pragma once

#include <cstdint>
#include <string>

namespace ls {

struct DeviceFault {
  int32_t raised = 0;  // set (atomically, first writer wins) by the kernel
  int32_t site = -1;   // from register_fault_site
  int64_t index = 0;   // the row it was found in
  int64_t value = 0;
  int64_t limit = 0;   // valid values are [0, limit)
};

// Host only. Registers where a kernel may report an out-of-range value: the op ("softmax_xent"),
// what was out of range ("label") and how to fix it; the strings must outlive the program
// (literals). Returns the site's number, passed to the kernel. Thread-safe.
int32_t register_fault_site(const char* op, const char* what, const char* hint);

// "softmax_xent: label 12 in row 3 is outside [0, 10); <hint>"
std::string describe_out_of_range(const char* op, const char* what, int64_t index, int64_t value,
                                  int64_t limit, const char* hint);
// The same message for a record a kernel filled in (its site registered).
std::string describe_fault(const DeviceFault& fault);

}  // namespace ls
