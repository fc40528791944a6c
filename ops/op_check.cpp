// The shared argument checks of the checked ops (see ops/op_check.h).
#include "ops/op_check.h"

#include <lockstep/error.h>

namespace ls::op_check {

void tensor(const char* op, const char* name, const Tensor& t, DType dtype, const Stream& stream) {
  LS_CHECK(t.defined(), op, ": ", name, " is an undefined Tensor; pass a ", dtype_name(dtype),
           " tensor");
  LS_CHECK(t.dtype() == dtype, op, ": ", name, " is ", t.describe(), "; expected dtype ",
           dtype_name(dtype));
  LS_CHECK(t.device() == stream.device(), op, ": ", name, " is ", t.describe(),
           " but the stream runs on ", stream.device().str(),
           "; all tensors must be on the stream's device");
}

void same_numel(const char* op, const char* name, const Tensor& t, const char* ref_name,
                const Tensor& ref) {
  LS_CHECK(t.numel() == ref.numel(), op, ": ", name, " is ", t.describe(), " but ", ref_name,
           " is ", ref.describe(), "; expected the same number of elements (", ref.numel(), ")");
}

void scalar(const char* op, const char* name, const Tensor& t) {
  LS_CHECK(t.numel() == 1, op, ": ", name, " is ", t.describe(),
           "; expected a single element, e.g. shape [1]");
}

void matrix(const char* op, const char* name, const Tensor& t, const char* hint) {
  LS_CHECK(t.ndim() == 2, op, ": ", name, " is ", t.describe(), "; expected a 2-D tensor (", hint,
           ")");
}

bool overlaps(const Tensor& x, const Tensor& y) {
  auto* x0 = static_cast<const char*>(x.data());
  auto* y0 = static_cast<const char*>(y.data());
  return x.nbytes() > 0 && y.nbytes() > 0 && x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

}  // namespace ls::op_check
