// IDX reader: parses the header, checks every size before allocating, then reads the payload from
// a plain file (FILE*) or a gzip stream (zlib's gz* API). Both go through one Source interface so
// the header checks and error messages are identical for .gz and plain files.
#include "engine/model/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>

#include <lockstep/error.h>

namespace ls::data {
namespace {

constexpr uint8_t kTypeUnsignedByte = 0x08;
constexpr int kMaxDims = 4;
constexpr size_t kGzipChunk = size_t{1} << 24;  // gzread takes an unsigned and returns an int

const char* type_name(uint8_t type) {
  switch (type) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    default: return "not an IDX type";
  }
}

std::string hex_byte(uint8_t b) {
  constexpr char kDigits[] = "0123456789abcdef";
  return std::string("0x") + kDigits[b >> 4] + kDigits[b & 0xf];
}

std::string format_dims(const std::vector<int64_t>& dims) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i];
  out << ']';
  return out.str();
}

// A byte stream that reads up to n bytes and returns how many it got; stream errors throw.
class Source {
 public:
  virtual ~Source() = default;
  virtual size_t read(uint8_t* out, size_t n) = 0;
};

class PlainSource final : public Source {
 public:
  PlainSource(const std::string& path, std::FILE* file) : path_(path), file_(file) {}
  ~PlainSource() override { std::fclose(file_); }
  PlainSource(const PlainSource&) = delete;
  PlainSource& operator=(const PlainSource&) = delete;

  size_t read(uint8_t* out, size_t n) override {
    size_t got = std::fread(out, 1, n, file_);
    LS_CHECK_IO(!std::ferror(file_), "IDX file '", path_, "': read error: ", std::strerror(errno),
                "; check that the file is readable and the disk is healthy");
    return got;
  }

 private:
  const std::string& path_;
  std::FILE* file_;
};

class GzipSource final : public Source {
 public:
  GzipSource(const std::string& path, gzFile file) : path_(path), file_(file) {
    gzbuffer(file_, 1 << 17);
  }
  ~GzipSource() override { gzclose(file_); }
  GzipSource(const GzipSource&) = delete;
  GzipSource& operator=(const GzipSource&) = delete;

  size_t read(uint8_t* out, size_t n) override {
    size_t total = 0;
    while (total < n) {
      unsigned want = static_cast<unsigned>(std::min(n - total, kGzipChunk));
      int got = gzread(file_, out + total, want);
      check_stream(got);
      if (got == 0) break;
      total += static_cast<size_t>(got);
    }
    return total;
  }

 private:
  // zlib reports a bad deflate block, a CRC/length mismatch or a cut-off stream through gzerror,
  // sometimes alongside a short (not negative) read, so it is checked after every call.
  void check_stream(int got) {
    int err = Z_OK;
    const char* message = gzerror(file_, &err);
    if (got >= 0 && err == Z_OK) return;
    LS_CHECK_IO(err != Z_ERRNO, "IDX file '", path_, "': read error: ", std::strerror(errno),
                "; check that the file is readable and the disk is healthy");
    LS_THROW_IO("IDX file '", path_,
                "': corrupt gzip stream (zlib: ", message ? message : "unknown",
                "); the download is probably damaged: delete the file and fetch it again");
  }

  const std::string& path_;
  gzFile file_;
};

// Parses the header and payload from src. file_size is known for plain files, so their size is
// compared with what the header promises before anything is allocated.
IdxArray read_from(const std::string& path, Source& src, std::optional<uint64_t> file_size) {
  uint8_t prefix[4];
  size_t got = src.read(prefix, sizeof prefix);
  LS_CHECK_IO(got == sizeof prefix, "IDX file '", path, "': truncated header: it holds ", got,
              " bytes but an IDX header needs at least 4; the file is damaged, fetch it again");
  LS_CHECK_IO(prefix[0] == 0 && prefix[1] == 0, "IDX file '", path,
              "': bad magic: the first two bytes must be 0 but are ", hex_byte(prefix[0]), " ",
              hex_byte(prefix[1]),
              "; this is not an IDX file (check the path and that it is not another format)");
  uint8_t type = prefix[2];
  LS_CHECK_IO(type == kTypeUnsignedByte, "IDX file '", path, "': unsupported type ", hex_byte(type),
              " (", type_name(type), "); only unsigned-byte (0x08) IDX files are supported");
  int ndims = prefix[3];
  LS_CHECK_IO(ndims >= 1 && ndims <= kMaxDims, "IDX file '", path, "': bad dimension count ", ndims,
              "; expected 1 to ", kMaxDims, " dims, so the file is damaged or not an IDX file");

  uint8_t dim_bytes[4 * kMaxDims];
  size_t header_dims = 4 * static_cast<size_t>(ndims);
  got = src.read(dim_bytes, header_dims);
  LS_CHECK_IO(got == header_dims, "IDX file '", path, "': truncated header: ", ndims, " dims need ",
              header_dims, " bytes of sizes but only ", got,
              " follow; the file is damaged, fetch it again");

  IdxArray array;
  array.dims.resize(static_cast<size_t>(ndims));
  bool has_zero = false;
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* b = dim_bytes + 4 * i;
    uint32_t d = (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
    array.dims[static_cast<size_t>(i)] = d;
    has_zero = has_zero || d == 0;
  }
  // Overflow-safe: each step stays <= kMaxIdxBytes before the next multiply.
  uint64_t payload = has_zero ? 0 : 1;
  for (int64_t d : array.dims) {
    if (payload == 0) break;
    LS_CHECK_IO(payload <= kMaxIdxBytes / static_cast<uint64_t>(d), "IDX file '", path,
                "': too large: dims ", format_dims(array.dims), " describe more than ",
                kMaxIdxBytes, " bytes, the most lockstep reads; the header is probably damaged");
    payload *= static_cast<uint64_t>(d);
  }

  if (file_size) {
    uint64_t expected = 4 + header_dims + payload;
    uint64_t have = *file_size - std::min<uint64_t>(*file_size, 4 + header_dims);
    LS_CHECK_IO(*file_size >= expected, "IDX file '", path, "': truncated data: dims ",
                format_dims(array.dims), " need ", payload, " data bytes but the file holds only ",
                have, "; the file is damaged, fetch it again");
    LS_CHECK_IO(*file_size <= expected, "IDX file '", path, "': trailing garbage: dims ",
                format_dims(array.dims), " describe ", payload, " data bytes but the file holds ",
                have, "; the file is damaged or not an IDX file");
  }

  array.data.resize(static_cast<size_t>(payload));
  got = src.read(array.data.data(), array.data.size());
  LS_CHECK_IO(got == payload, "IDX file '", path, "': truncated data: dims ",
              format_dims(array.dims), " need ", payload, " data bytes but the file holds only ",
              got, "; the file is damaged, fetch it again");
  uint8_t extra;
  LS_CHECK_IO(src.read(&extra, 1) == 0, "IDX file '", path, "': trailing garbage: more than the ",
              payload, " data bytes that dims ", format_dims(array.dims),
              " describe; the file is damaged or not an IDX file");
  return array;
}

}  // namespace

IdxArray read_idx(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::file_status status = fs::status(path, ec);
  LS_CHECK_IO(status.type() != fs::file_type::not_found, "IDX file '", path,
              "' not found; check the path");
  LS_CHECK_IO(!ec, "IDX file '", path, "': cannot access: ", ec.message(),
              "; check the path and the permissions of its folders");
  LS_CHECK_IO(fs::is_regular_file(status), "IDX file '", path,
              "' is not a regular file; pass the path of an IDX file, not a directory");
  uint64_t file_size = fs::file_size(path, ec);
  LS_CHECK_IO(!ec, "IDX file '", path, "': cannot read its size: ", ec.message());

  std::FILE* file = std::fopen(path.c_str(), "rb");
  LS_CHECK_IO(file != nullptr, "IDX file '", path, "': cannot open: ", std::strerror(errno),
              "; check its permissions");
  auto plain = std::make_unique<PlainSource>(path, file);
  uint8_t magic[2] = {0, 0};
  size_t got = plain->read(magic, 2);
  bool gzip = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!gzip) {
    std::rewind(file);
    return read_from(path, *plain, file_size);
  }
  plain.reset();
  gzFile gz = gzopen(path.c_str(), "rb");
  LS_CHECK_IO(gz != nullptr, "IDX file '", path,
              "': cannot open gzip stream: ", std::strerror(errno), "; check its permissions");
  GzipSource source(path, gz);
  return read_from(path, source, std::nullopt);
}

}  // namespace ls::data
