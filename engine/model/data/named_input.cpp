// NamedInput (see lockstep/data/named_input.h).
#include <lockstep/data/named_input.h>

#include <cstring>
#include <set>

#include <lockstep/error.h>

namespace ls::data {
namespace {

template <typename T>
NamedInput from_values(std::string name, DType dtype, std::vector<int64_t> shape,
                       std::span<const T> values) {
  NamedInput input{std::move(name), dtype, std::move(shape), {}};
  input.bytes.resize(values.size_bytes());
  if (!values.empty()) std::memcpy(input.bytes.data(), values.data(), values.size_bytes());
  return input;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace

int64_t NamedInput::example_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

NamedInput NamedInput::f32(std::string name, std::vector<int64_t> shape,
                           std::span<const float> values) {
  return from_values(std::move(name), DType::kF32, std::move(shape), values);
}

NamedInput NamedInput::i32(std::string name, std::vector<int64_t> shape,
                           std::span<const int32_t> values) {
  return from_values(std::move(name), DType::kI32, std::move(shape), values);
}

NamedInput NamedInput::bf16(std::string name, std::vector<int64_t> shape,
                            std::span<const uint16_t> values) {
  return from_values(std::move(name), DType::kBF16, std::move(shape), values);
}

void check_named_inputs(const std::vector<NamedInput>& inputs, int64_t size) {
  std::set<std::string> names;
  for (const NamedInput& input : inputs) {
    LS_CHECK(!input.name.empty(), "a named input has no name; give every Batch::inputs entry one");
    LS_CHECK(names.insert(input.name).second, "two batch inputs are named '", input.name,
             "'; names must be unique");
    for (int64_t d : input.shape) {
      LS_CHECK(d > 0, "batch input '", input.name, "' has per-example shape ",
               shape_text(input.shape), "; every dimension must be positive");
    }
    const size_t want = static_cast<size_t>(size) * input.example_bytes();
    LS_CHECK(input.bytes.size() == want, "batch input '", input.name, "' holds ",
             input.bytes.size(), " bytes; ", size, " examples of ", dtype_name(input.dtype), " ",
             shape_text(input.shape), " are ", want, " bytes");
  }
}

}  // namespace ls::data
