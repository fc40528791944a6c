// Reader for IDX files (the MNIST / Fashion-MNIST container), plain or gzip-compressed.
//
// Contract: read_idx returns the dims and the raw bytes of an unsigned-byte (type 0x08) IDX file
// with 1..4 dims, or throws ls::Error naming the path and the problem. The file must hold exactly
// the bytes its dims promise: fewer is "truncated", more is "trailing garbage". No allocation is
// sized from the header before the size is checked against kMaxIdxBytes (and, for plain files,
// against the file size). Thread-safety: a pure function of the file; safe to call concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls::data {

// The largest payload read_idx accepts (2 GiB); Fashion-MNIST's largest file is 47 MB.
inline constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 31;

struct IdxArray {
  std::vector<int64_t> dims;   // as in the header, outermost first
  std::vector<uint8_t> data;   // product(dims) bytes, row-major
};

IdxArray read_idx(const std::string& path);

}  // namespace ls::data
