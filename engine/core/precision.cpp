// Names of precisions (see lockstep/precision.h).
#include <lockstep/precision.h>

namespace ls {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kF32: return "f32";
    case Precision::kBF16: return "bf16";
    case Precision::kF16: return "f16";
  }
  return "?";
}

std::optional<Precision> parse_precision(std::string_view name) {
  if (name == "f32") return Precision::kF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "f16") return Precision::kF16;
  return std::nullopt;
}

}  // namespace ls
