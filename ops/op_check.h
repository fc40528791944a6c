// The argument checks every checked op runs before it calls a kernel, one copy for all op
// families: each failure raises ls::Error (kind usage) naming the op, the argument, what it is
// and what was expected.
#pragma once

#include <lockstep/dtype.h>
#include <lockstep/stream.h>
#include <lockstep/tensor.h>

namespace ls::op_check {

// t is defined, has `dtype` and lives on the stream's device.
void tensor(const char* op, const char* name, const Tensor& t, DType dtype, const Stream& stream);
// t has as many elements as ref.
void same_numel(const char* op, const char* name, const Tensor& t, const char* ref_name,
                const Tensor& ref);
// t holds exactly one element (a scalar result such as a loss or a count).
void scalar(const char* op, const char* name, const Tensor& t);
// t is 2-D (e.g. [rows, cols]); `hint` says how to get there.
void matrix(const char* op, const char* name, const Tensor& t, const char* hint);
// The byte ranges of x and y share memory.
bool overlaps(const Tensor& x, const Tensor& y);

}  // namespace ls::op_check
