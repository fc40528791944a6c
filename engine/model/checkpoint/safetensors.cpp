// safetensors writer and hostile-input reader (see engine/model/checkpoint/safetensors.h).
// See Note [Safetensors validation] for the order of the reader's checks.
#include "engine/model/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <numeric>

#include <lockstep/error.h>
#include "engine/core/json_reader.h"
#include "engine/model/checkpoint/atomic_file.h"

namespace ls::checkpoint {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; lockstep writes host memory as is");

namespace {

struct DTypeInfo {
  SafetensorsDType dtype;
  std::string_view name;
  size_t size;
};

constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {SafetensorsDType::kBool, "BOOL", 1},    {SafetensorsDType::kU8, "U8", 1},
    {SafetensorsDType::kI8, "I8", 1},        {SafetensorsDType::kF8E5M2, "F8_E5M2", 1},
    {SafetensorsDType::kF8E4M3, "F8_E4M3", 1}, {SafetensorsDType::kI16, "I16", 2},
    {SafetensorsDType::kU16, "U16", 2},      {SafetensorsDType::kF16, "F16", 2},
    {SafetensorsDType::kBF16, "BF16", 2},    {SafetensorsDType::kI32, "I32", 4},
    {SafetensorsDType::kU32, "U32", 4},      {SafetensorsDType::kF32, "F32", 4},
    {SafetensorsDType::kF64, "F64", 8},      {SafetensorsDType::kI64, "I64", 8},
    {SafetensorsDType::kU64, "U64", 8},
}};

constexpr std::string_view kMetadataKey = "__metadata__";

// Appends `text` as a JSON string the way serde_json (the reference) does: '"', '\\' and the
// short escapes \b \f \n \r \t, other control characters as \u00XX, everything else raw.
void append_json_string(std::string& out, std::string_view text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

// product(shape) * elem_size, or nullopt on overflow.
std::optional<uint64_t> byte_count(std::span<const uint64_t> shape, size_t elem_size) {
  uint64_t n = elem_size;
  for (uint64_t d : shape) {
    if (d != 0 && n > UINT64_MAX / d) return std::nullopt;
    n *= d;
  }
  return n;
}

// A tensor name for messages: hostile names can be megabytes long.
std::string short_name(std::string_view name) {
  return name.size() <= 80 ? std::string(name) : std::string(name.substr(0, 80)) + "...";
}

std::string shape_text(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

// The header (length prefix included) for tensors in `order`, with their data offsets.
std::string build_header(const std::vector<NamedHostTensor>& tensors,
                         const std::vector<size_t>& order, const SafetensorsMetadata& metadata) {
  std::string json = "{";
  if (!metadata.empty()) {
    json += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) json += ',';
      first = false;
      append_json_string(json, key);
      json += ':';
      append_json_string(json, value);
    }
    json += '}';
  }
  uint64_t offset = 0;
  for (size_t i : order) {
    const NamedHostTensor& t = tensors[i];
    if (json.size() > 1) json += ',';
    append_json_string(json, t.name);
    json += ":{\"dtype\":\"";
    json += safetensors_dtype_name(t.dtype);
    json += "\",\"shape\":[";
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d) json += ',';
      json += std::to_string(t.shape[d]);
    }
    json += "],\"data_offsets\":[" + std::to_string(offset) + ",";
    offset += t.data.size();
    json += std::to_string(offset) + "]}";
  }
  json += '}';
  json.append((8 - json.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{json.size()} >> (8 * i)) & 0xff);
  return out + json;
}

void check_utf8(std::string_view text, std::string_view what) {
  std::string quoted;
  append_json_string(quoted, text);
  try {
    parse_json(quoted, what);
  } catch (const Error& e) {
    LS_THROW_IO("cannot write safetensors: ", what, " is not valid UTF-8: ", e.message());
  }
}

// Checks the tensors and returns the order the reference writes them in: descending dtype
// (the enum order, so larger elements first and every tensor stays aligned), then by name.
std::vector<size_t> check_and_order(const std::vector<NamedHostTensor>& tensors,
                                    const SafetensorsMetadata& metadata) {
  for (const auto& [key, value] : metadata) {
    check_utf8(key, "a metadata key");
    check_utf8(value, "the value of metadata key '" + key + "'");
  }
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (tensors[a].dtype != tensors[b].dtype) return tensors[a].dtype > tensors[b].dtype;
    return tensors[a].name < tensors[b].name;
  });
  std::vector<const std::string*> names;
  for (const NamedHostTensor& t : tensors) {
    LS_CHECK_IO(!t.name.empty() && t.name != kMetadataKey,
                "cannot write safetensors: tensor name '", t.name,
                "' is reserved or empty; rename the tensor");
    check_utf8(t.name, "tensor name '" + t.name + "'");
    std::vector<uint64_t> shape;
    for (int64_t d : t.shape) {
      LS_CHECK_IO(d >= 0, "cannot write safetensors: tensor '", t.name, "' has negative extent ",
                  d);
      shape.push_back(static_cast<uint64_t>(d));
    }
    const auto bytes = byte_count(shape, safetensors_dtype_size(t.dtype));
    LS_CHECK_IO(bytes && *bytes == t.data.size(), "cannot write safetensors: tensor '", t.name,
                "' of dtype ", safetensors_dtype_name(t.dtype), " and shape ", shape_text(shape),
                " needs ", bytes ? std::to_string(*bytes) : "too many", " bytes, but its data has ",
                t.data.size());
    names.push_back(&t.name);
  }
  std::sort(names.begin(), names.end(), [](auto* a, auto* b) { return *a < *b; });
  for (size_t i = 1; i < names.size(); ++i) {
    LS_CHECK_IO(*names[i] != *names[i - 1], "cannot write safetensors: two tensors are named '",
                *names[i], "'; names must be unique");
  }
  return order;
}

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

std::string_view safetensors_dtype_name(SafetensorsDType t) {
  return kDTypes[static_cast<size_t>(t)].name;
}

size_t safetensors_dtype_size(SafetensorsDType t) { return kDTypes[static_cast<size_t>(t)].size; }

std::optional<SafetensorsDType> parse_safetensors_dtype(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

SafetensorsDType to_safetensors_dtype(DType t) {
  switch (t) {
    case DType::kF32: return SafetensorsDType::kF32;
    case DType::kBF16: return SafetensorsDType::kBF16;
    case DType::kI32: return SafetensorsDType::kI32;
  }
  LS_ASSERT(false, "unknown DType ", static_cast<int>(t));
}

std::vector<std::byte> serialize_safetensors(const std::vector<NamedHostTensor>& tensors,
                                             const SafetensorsMetadata& metadata) {
  const std::vector<size_t> order = check_and_order(tensors, metadata);
  const std::string header = build_header(tensors, order, metadata);
  std::vector<std::byte> out;
  const auto head = as_bytes(header);
  out.insert(out.end(), head.begin(), head.end());
  for (size_t i : order) out.insert(out.end(), tensors[i].data.begin(), tensors[i].data.end());
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedHostTensor>& tensors,
                       const SafetensorsMetadata& metadata) {
  const std::vector<size_t> order = check_and_order(tensors, metadata);
  AtomicFileWriter file(path);
  file.append(as_bytes(build_header(tensors, order, metadata)));
  for (size_t i : order) file.append(tensors[i].data);
  file.commit();
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const SafetensorsTensor& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

const SafetensorsTensor& SafetensorsFile::at(std::string_view name) const {
  const SafetensorsTensor* t = find(name);
  LS_CHECK_IO(t != nullptr, name_, ": no tensor named '", name, "' (the file holds ",
              tensors_.size(), " tensors)");
  return *t;
}

// Note [Safetensors validation]
// The reader checks, in this order, before it allocates anything sized by the file's contents:
//  1. at least 8 bytes; the header length N is at most the cap and at most file size - 8;
//  2. the header is one JSON object (strict parser, duplicate keys refused, depth capped);
//  3. each entry: known dtype, shape of non-negative integers, data_offsets [begin <= end]
//     with end inside the data buffer, and end - begin == product(shape) * dtype size
//     (computed with overflow checks);
//  4. sorted by offsets, the entries tile the data buffer exactly: no overlap, no gap, no
//     trailing bytes (the reference's MetadataIncompleteBuffer rule).
// Only then is the buffer (whose size is the real file size) read.
class SafetensorsReader {
 public:
  struct Entry {
    std::string name;
    SafetensorsDType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  struct Layout {
    uint64_t header_bytes = 0;
    std::vector<Entry> entries;
    SafetensorsMetadata metadata;
  };

  // Steps 1-4 of the Note: `prefix` holds at least the first 8 + N bytes of a file of
  // `file_size` bytes (or only the first 8 when that is all there is).
  static uint64_t header_length(std::span<const std::byte> prefix, uint64_t file_size,
                                std::string_view name, const SafetensorsLimits& limits) {
    LS_CHECK_IO(file_size >= 8, name, ": truncated: ", file_size,
                " bytes, but a safetensors file starts with an 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(prefix[i]);
    LS_CHECK_IO(n <= limits.max_header_bytes, name, ": header length ", n,
                " is larger than the cap of ", limits.max_header_bytes, " bytes (corrupt file?)");
    LS_CHECK_IO(n <= file_size - 8, name, ": header length ", n, " is larger than the file (",
                file_size, " bytes): the file is truncated or not a safetensors file");
    return n;
  }

  static Layout parse_layout(std::string_view header, uint64_t buffer_bytes,
                             std::string_view name) {
    const std::string source = std::string(name) + " header";
    JsonLimits json_limits;
    json_limits.max_bytes = header.size();
    json_limits.max_values = size_t{1} << 24;
    const JsonValue root = parse_json(header, source, json_limits);
    LS_CHECK_IO(root.is_object(), source, ": expected a JSON object, got ",
                json_kind_name(root.kind()));
    Layout layout;
    layout.header_bytes = header.size();
    for (const auto& [key, value] : root.members()) {
      if (key == kMetadataKey) {
        layout.metadata = parse_metadata(value, source);
      } else {
        layout.entries.push_back(parse_entry(key, value, buffer_bytes, source));
      }
    }
    check_tiling(layout.entries, buffer_bytes, name);
    return layout;
  }

  static SafetensorsFile assemble(std::vector<std::byte> bytes, Layout layout,
                                  std::string_view name) {
    SafetensorsFile file;
    file.name_ = std::string(name);
    file.bytes_ = std::move(bytes);
    file.metadata_ = std::move(layout.metadata);
    std::sort(layout.entries.begin(), layout.entries.end(), offset_order);
    const std::byte* buffer = file.bytes_.data() + 8 + layout.header_bytes;
    for (Entry& e : layout.entries) {
      file.tensors_.push_back({std::move(e.name), e.dtype, std::move(e.shape),
                               std::span(buffer + e.begin, e.end - e.begin)});
    }
    return file;
  }

 private:
  static bool offset_order(const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  }

  static SafetensorsMetadata parse_metadata(const JsonValue& value, const std::string& source) {
    LS_CHECK_IO(value.is_object(), source, ": byte ", value.offset(),
                ": __metadata__ must be an object of strings, got ", json_kind_name(value.kind()));
    SafetensorsMetadata out;
    for (const auto& [key, v] : value.members()) {
      LS_CHECK_IO(v.is_string(), source, ": byte ", v.offset(), ": __metadata__ value of '", key,
                  "' must be a string, got ", json_kind_name(v.kind()));
      out.emplace(key, v.as_string());
    }
    return out;
  }

  static uint64_t to_u64(const JsonValue& v, const std::string& source, const std::string& what) {
    LS_CHECK_IO(v.is_number(), source, ": byte ", v.offset(), ": ", what,
                " must be a non-negative integer, got ", json_kind_name(v.kind()));
    try {
      return v.as_uint64();
    } catch (const Error& e) {
      LS_THROW_IO(source, ": ", what, ": ", e.message());
    }
  }

  static std::vector<uint64_t> to_u64_array(const JsonValue& v, const std::string& source,
                                            const std::string& what) {
    LS_CHECK_IO(v.is_array(), source, ": byte ", v.offset(), ": ", what, " must be an array, got ",
                json_kind_name(v.kind()));
    std::vector<uint64_t> out;
    for (const JsonValue& item : v.items()) out.push_back(to_u64(item, source, what));
    return out;
  }

  static Entry parse_entry(const std::string& name, const JsonValue& value, uint64_t buffer_bytes,
                           const std::string& source) {
    const std::string tensor = "tensor '" + short_name(name) + "'";
    LS_CHECK_IO(value.is_object(), source, ": byte ", value.offset(), ": ", tensor,
                " must be an object with dtype, shape and data_offsets, got ",
                json_kind_name(value.kind()));
    for (const auto& member : value.members()) {
      LS_CHECK_IO(
          member.first == "dtype" || member.first == "shape" || member.first == "data_offsets",
          source, ": byte ", member.second.offset(), ": ", tensor, " has unknown field '",
          member.first, "' (expected dtype, shape, data_offsets)");
    }
    const JsonValue* dtype = value.find("dtype");
    const JsonValue* shape = value.find("shape");
    const JsonValue* offsets = value.find("data_offsets");
    LS_CHECK_IO(dtype && shape && offsets, source, ": byte ", value.offset(), ": ", tensor,
                " lacks ",
                !dtype   ? "dtype"
                : !shape ? "shape"
                         : "data_offsets");
    LS_CHECK_IO(dtype->is_string(), source, ": byte ", dtype->offset(), ": dtype of ", tensor,
                " must be a string, got ", json_kind_name(dtype->kind()));
    const auto parsed = parse_safetensors_dtype(dtype->as_string());
    LS_CHECK_IO(
        parsed.has_value(), source, ": byte ", dtype->offset(), ": ", tensor,
        " has unknown or unsupported dtype '", dtype->as_string(),
        "' (supported: BOOL U8 I8 F8_E5M2 F8_E4M3 I16 U16 F16 BF16 I32 U32 F32 F64 I64 U64)");
    Entry e{name, *parsed, {}, 0, 0};
    const std::vector<uint64_t> dims = to_u64_array(*shape, source, "shape of " + tensor);
    for (uint64_t d : dims) {
      LS_CHECK_IO(d <= static_cast<uint64_t>(INT64_MAX), source, ": shape of ", tensor,
                  " has extent ", d, ", beyond 2^63-1");
      e.shape.push_back(static_cast<int64_t>(d));
    }
    const std::vector<uint64_t> range = to_u64_array(*offsets, source, "data_offsets of " + tensor);
    LS_CHECK_IO(range.size() == 2, source, ": byte ", offsets->offset(), ": data_offsets of ",
                tensor, " must be [begin, end], got ", range.size(), " numbers");
    e.begin = range[0];
    e.end = range[1];
    LS_CHECK_IO(e.begin <= e.end, source, ": data_offsets of ", tensor, " are reversed: [", e.begin,
                ", ", e.end, "]");
    LS_CHECK_IO(e.end <= buffer_bytes, source, ": data_offsets of ", tensor, " [", e.begin, ", ",
                e.end, "] are out of range: the data buffer holds ", buffer_bytes,
                " bytes (truncated file or corrupt header)");
    const auto bytes = byte_count(dims, safetensors_dtype_size(e.dtype));
    LS_CHECK_IO(bytes.has_value(), source, ": ", tensor, " of shape ", shape_text(dims),
                " has more elements than fit in 64 bits");
    LS_CHECK_IO(*bytes == e.end - e.begin, source, ": ", tensor, " of dtype ", dtype->as_string(),
                " and shape ", shape_text(dims), " needs ", *bytes, " bytes, but data_offsets [",
                e.begin, ", ", e.end, "] hold ", e.end - e.begin, " (shape does not match bytes)");
    return e;
  }

  static void check_tiling(std::vector<Entry> entries, uint64_t buffer_bytes,
                           std::string_view name) {
    std::sort(entries.begin(), entries.end(), offset_order);
    uint64_t cursor = 0;
    const Entry* previous = nullptr;
    for (const Entry& e : entries) {
      LS_CHECK_IO(e.begin >= cursor, name, ": tensor '", short_name(e.name), "' [", e.begin, ", ",
                  e.end, ") overlaps tensor '", short_name(previous ? previous->name : ""), "' [",
                  previous ? previous->begin : 0, ", ", cursor,
                  "): the data buffer must not be shared");
      LS_CHECK_IO(e.begin == cursor, name, ": gap in the data buffer: bytes [", cursor, ", ",
                  e.begin, ") belong to no tensor (before tensor '", short_name(e.name), "')");
      cursor = e.end;
      previous = &e;
    }
    LS_CHECK_IO(cursor == buffer_bytes, name, ": trailing bytes: the tensors cover ", cursor,
                " bytes of the data buffer, but the file holds ", buffer_bytes - cursor, " more");
  }
};

SafetensorsFile read_safetensors_from_memory(std::vector<std::byte> bytes, std::string_view name,
                                             const SafetensorsLimits& limits) {
  LS_CHECK_IO(bytes.size() <= limits.max_file_bytes, name, ": ", bytes.size(),
              " bytes, more than the limit of ", limits.max_file_bytes);
  const uint64_t n = SafetensorsReader::header_length(bytes, bytes.size(), name, limits);
  const std::string_view header(reinterpret_cast<const char*>(bytes.data()) + 8, n);
  auto layout = SafetensorsReader::parse_layout(header, bytes.size() - 8 - n, name);
  return SafetensorsReader::assemble(std::move(bytes), std::move(layout), name);
}

namespace {

class ReadFd {
 public:
  explicit ReadFd(const std::string& path) {
    do {
      fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    } while (fd_ < 0 && errno == EINTR);
    LS_CHECK_IO(fd_ >= 0, path, ": cannot open: ", std::strerror(errno));
  }
  ~ReadFd() { ::close(fd_); }
  ReadFd(const ReadFd&) = delete;
  ReadFd& operator=(const ReadFd&) = delete;

  // Reads [offset, offset + out.size()); false when the file ends first.
  bool read_at(std::span<std::byte> out, uint64_t offset, const std::string& path) const {
    size_t done = 0;
    while (done < out.size()) {
      const size_t chunk = std::min<size_t>(out.size() - done, size_t{1} << 30);
      const ssize_t got = ::pread(fd_, out.data() + done, chunk, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      LS_CHECK_IO(got >= 0, path, ": read error: ", std::strerror(errno));
      if (got == 0) return false;
      done += static_cast<size_t>(got);
    }
    return true;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace

SafetensorsFile read_safetensors(const std::string& path, const SafetensorsLimits& limits) {
  ReadFd fd(path);
  struct stat st{};
  LS_CHECK_IO(::fstat(fd.get(), &st) == 0, path, ": cannot stat: ", std::strerror(errno));
  LS_CHECK_IO(S_ISREG(st.st_mode), path, ": not a regular file");
  const auto size = static_cast<uint64_t>(st.st_size);
  LS_CHECK_IO(size <= limits.max_file_bytes, path, ": ", size, " bytes, more than the limit of ",
              limits.max_file_bytes);
  std::array<std::byte, 8> prefix{};
  if (size >= 8) LS_CHECK_IO(fd.read_at(prefix, 0, path), path, ": shrank while it was read");
  const uint64_t n = SafetensorsReader::header_length(prefix, size, path, limits);
  std::string header(n, '\0');  // n <= min(cap, size - 8): checked
  LS_CHECK_IO(fd.read_at(std::as_writable_bytes(std::span(header)), 8, path), path,
              ": shrank while it was read");
  auto layout = SafetensorsReader::parse_layout(header, size - 8 - n, path);
  std::vector<std::byte> bytes(size);  // the real file size, and the layout tiles it exactly
  LS_CHECK_IO(fd.read_at(bytes, 0, path), path, ": shrank while it was read");
  std::byte extra;
  LS_CHECK_IO(!fd.read_at(std::span(&extra, 1), size, path), path, ": grew while it was read");
  return SafetensorsReader::assemble(std::move(bytes), std::move(layout), path);
}

}  // namespace ls::checkpoint
