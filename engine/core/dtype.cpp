// Names of element types, for messages.
#include <lockstep/dtype.h>

namespace ls {
std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kI32: return "i32";
  }
  return "?";
}
}  // namespace ls
