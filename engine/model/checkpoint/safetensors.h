// Reader and writer of the safetensors format (github.com/huggingface/safetensors), so that
// checkpoints open in PyTorch/NumPy: an 8-byte little-endian header length N, N bytes of JSON
// {"NAME": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}} padded
// with spaces to a multiple of 8, then the data buffer (offsets relative to its start).
// Writer: the reference's layout, byte for byte (tensors ordered by dtype size, largest first,
// then name; compact JSON; metadata first), written through AtomicFileWriter.
// Reader: treats the file as hostile: every malformed case is an ls::Error naming the file and
// the problem, and nothing is allocated from a size that was not first checked against the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <lockstep/dtype.h>

namespace ls::checkpoint {

// The byte-sized-or-larger dtypes of the format, in the reference's order (which it sorts by).
enum class SafetensorsDType : uint8_t {
  kBool, kU8, kI8, kF8E5M2, kF8E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64
};
std::string_view safetensors_dtype_name(SafetensorsDType t);  // "F32", "BF16", ...
size_t safetensors_dtype_size(SafetensorsDType t);            // bytes per element
std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name);
SafetensorsDType to_safetensors_dtype(DType t);               // engine dtype -> file dtype

// A tensor in host memory, to be written. `data` is row-major, little-endian, exactly
// product(shape) * dtype size bytes; it is only read during write_safetensors.
struct NamedHostTensor {
  std::string name;
  SafetensorsDType dtype = SafetensorsDType::kF32;
  std::vector<int64_t> shape;  // {} is a 0-d tensor (one element); a 0 extent makes it empty
  std::span<const std::byte> data;
};

using SafetensorsMetadata = std::map<std::string, std::string>;

// The file's bytes: header, then tensors. Raises ls::Error for an empty or "__metadata__" name,
// a duplicate name, a negative extent, or data whose size does not match dtype and shape.
std::vector<std::byte> serialize_safetensors(const std::vector<NamedHostTensor>& tensors,
                                             const SafetensorsMetadata& metadata = {});
// Streams the same bytes to `path` atomically (temp file, fsync, rename, fsync dir).
void write_safetensors(const std::string& path, const std::vector<NamedHostTensor>& tensors,
                       const SafetensorsMetadata& metadata = {});

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;  // points into the owning SafetensorsFile
};

// A parsed file. Owns the file's bytes; tensors' spans point into them (stable under move,
// hence not copyable). Tensors are in data-offset order.
class SafetensorsFile {
 public:
  SafetensorsFile() = default;
  SafetensorsFile(SafetensorsFile&&) = default;
  SafetensorsFile& operator=(SafetensorsFile&&) = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const SafetensorsMetadata& metadata() const { return metadata_; }
  const SafetensorsTensor* find(std::string_view name) const;
  // Like find, but raises ls::Error naming the file when the tensor is missing.
  const SafetensorsTensor& at(std::string_view name) const;
  std::span<const std::byte> file_bytes() const { return bytes_; }
  const std::string& name() const { return name_; }

 private:
  friend class SafetensorsReader;
  std::string name_;
  std::vector<std::byte> bytes_;
  std::vector<SafetensorsTensor> tensors_;
  SafetensorsMetadata metadata_;
};

struct SafetensorsLimits {
  uint64_t max_header_bytes = uint64_t{100} << 20;  // 100 MiB
  uint64_t max_file_bytes = UINT64_MAX;
};

// Reads and validates `path`. Refuses: a file shorter than 8 bytes; a header length above the cap
// or beyond the end of the file; a header that is not a JSON object of valid entries (unknown
// dtype, bad shape, element count overflow, shape/byte-range mismatch, duplicate names);
// offsets out of range, overlapping, or leaving gaps; a truncated buffer; trailing bytes.
SafetensorsFile read_safetensors(const std::string& path, const SafetensorsLimits& limits = {});
// The same checks on bytes already in memory (takes ownership; `name` is used in messages).
SafetensorsFile read_safetensors_from_memory(std::vector<std::byte> bytes, std::string_view name,
                                             const SafetensorsLimits& limits = {});

}  // namespace ls::checkpoint
