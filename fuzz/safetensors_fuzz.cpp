// libFuzzer target for the hostile-input readers: each input is parsed as JSON (parse_json with
// small limits) and as a whole safetensors file (read_safetensors_from_memory). Contract under
// test: any input either parses or raises ls::Error; never a crash, leak, sanitizer report or
// unbounded allocation. A file that parses must survive serialize -> read unchanged.
// Build and run: scripts/fuzz (needs clang and libclang-rt-14-dev).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "engine/model/checkpoint/safetensors.h"

namespace {

using ls::checkpoint::NamedHostTensor;
using ls::checkpoint::SafetensorsFile;

bool same(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors().size() != b.tensors().size() || a.metadata() != b.metadata()) return false;
  for (const auto& t : a.tensors()) {
    const auto* u = b.find(t.name);
    if (u == nullptr || u->dtype != t.dtype || u->shape != t.shape ||
        !std::equal(t.data.begin(), t.data.end(), u->data.begin(), u->data.end())) {
      return false;
    }
  }
  return true;
}

void round_trip(const SafetensorsFile& file) {
  std::vector<NamedHostTensor> named;
  for (const auto& t : file.tensors()) {
    if (t.name.empty()) return;  // legal in the format, refused by our writer
    named.push_back({t.name, t.dtype, t.shape, t.data});
  }
  const SafetensorsFile again = ls::checkpoint::read_safetensors_from_memory(
      ls::checkpoint::serialize_safetensors(named, file.metadata()), "round trip");
  if (!same(file, again)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    ls::JsonLimits limits;
    limits.max_depth = 16;
    ls::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json",
                   limits);
  } catch (const ls::Error&) {
  }
  std::vector<std::byte> bytes(size);
  if (size > 0) std::memcpy(bytes.data(), data, size);
  try {
    const SafetensorsFile file =
        ls::checkpoint::read_safetensors_from_memory(std::move(bytes), "fuzz");
    round_trip(file);
  } catch (const ls::Error&) {
  }
  return 0;
}
