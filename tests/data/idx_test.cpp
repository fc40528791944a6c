// Tests for ls::data::read_idx: exact round trips and every malformed-file case, each run on a
// plain file and on the same bytes gzipped (parameterised), plus gzip-only corruption cases.
// Each test writes its files into its own temporary directory, removed afterwards.
#include "engine/model/data/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <lockstep/error.h>

namespace ls::data {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

Bytes idx_bytes(uint8_t type, const std::vector<uint32_t>& dims, const Bytes& data) {
  Bytes out = {0, 0, type, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(d >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_plain(const fs::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

void write_gzip(const fs::path& path, const Bytes& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

Bytes read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Gives each test its own empty directory, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    dir_ = fs::temp_directory_path() / ("ls_idx_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path dir_;
};

// Parameter: write the file gzipped (true) or plain (false).
class IdxTest : public TempDirTest, public ::testing::WithParamInterface<bool> {
 protected:
  bool gzip() const { return GetParam(); }

  // Writes bytes as plain or gzip (per the test parameter) and returns the path.
  std::string write(const Bytes& bytes) {
    fs::path path = dir_ / (gzip() ? "data.idx.gz" : "data.idx");
    if (gzip()) {
      write_gzip(path, bytes);
    } else {
      write_plain(path, bytes);
    }
    return path.string();
  }
};

// read_idx(path) must throw ls::Error whose message names the path and contains every word.
void expect_idx_error(const std::string& path, const std::vector<std::string>& words) {
  EXPECT_THROW(read_idx(path), ls::Error);
  try {
    read_idx(path);
  } catch (const ls::Error& e) {
    std::string message = e.what();
    EXPECT_NE(message.find(path), std::string::npos) << message;
    for (const std::string& w : words) EXPECT_NE(message.find(w), std::string::npos) << message;
  }
}

TEST_P(IdxTest, RoundTripThreeDims) {
  Bytes data;
  for (int i = 0; i < 2 * 3 * 4; ++i) data.push_back(static_cast<uint8_t>(i * 11));
  IdxArray a = read_idx(write(idx_bytes(0x08, {2, 3, 4}, data)));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(a.data, data);
}

TEST_P(IdxTest, RoundTripOneAndFourDimsAndBigEndianSizes) {
  Bytes one = {0, 255, 7};
  IdxArray a = read_idx(write(idx_bytes(0x08, {3}, one)));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{3}));
  EXPECT_EQ(a.data, one);

  // 258 = 0x0102 checks the byte order of the size fields.
  Bytes four(258 * 1 * 2 * 1);
  for (size_t i = 0; i < four.size(); ++i) four[i] = static_cast<uint8_t>(i % 251);
  IdxArray b = read_idx(write(idx_bytes(0x08, {258, 1, 2, 1}, four)));
  EXPECT_EQ(b.dims, (std::vector<int64_t>{258, 1, 2, 1}));
  EXPECT_EQ(b.data, four);
}

TEST_P(IdxTest, ZeroSizedDimIsEmptyArray) {
  IdxArray a = read_idx(write(idx_bytes(0x08, {0, 28, 28}, {})));
  EXPECT_EQ(a.dims, (std::vector<int64_t>{0, 28, 28}));
  EXPECT_TRUE(a.data.empty());
}

TEST_P(IdxTest, BadMagic) {
  Bytes bytes = idx_bytes(0x08, {2}, {1, 2});
  bytes[1] = 0x42;
  expect_idx_error(write(bytes), {"bad magic", "0x42"});
}

TEST_P(IdxTest, UnsupportedType) {
  expect_idx_error(write(idx_bytes(0x0D, {1}, {0, 0, 0, 0})),
                   {"unsupported type", "0x0d", "float32"});
  expect_idx_error(write(idx_bytes(0x0C, {1}, {0, 0, 0, 0})), {"unsupported type", "int32"});
}

TEST_P(IdxTest, ZeroDims) {
  expect_idx_error(write(idx_bytes(0x08, {}, {})), {"bad dimension count 0"});
}

TEST_P(IdxTest, TooManyDims) {
  expect_idx_error(write(idx_bytes(0x08, {1, 1, 1, 1, 1}, {9})), {"bad dimension count 5"});
}

TEST_P(IdxTest, EmptyFileIsTruncatedHeader) {
  expect_idx_error(write({}), {"truncated header"});
}

TEST_P(IdxTest, TruncatedDimSizes) {
  Bytes bytes = idx_bytes(0x08, {2, 3, 4}, {});
  bytes.resize(4 + 5);  // 3 dims need 12 size bytes; give 5
  expect_idx_error(write(bytes), {"truncated header"});
}

TEST_P(IdxTest, TruncatedData) {
  Bytes bytes = idx_bytes(0x08, {2, 3}, {1, 2, 3, 4, 5, 6});
  bytes.pop_back();
  expect_idx_error(write(bytes), {"truncated data", "need 6", "only 5"});
}

TEST_P(IdxTest, TrailingGarbage) {
  Bytes bytes = idx_bytes(0x08, {2, 3}, {1, 2, 3, 4, 5, 6});
  bytes.push_back(99);
  expect_idx_error(write(bytes), {"trailing garbage"});
}

TEST_P(IdxTest, DimsBeyondCapAreRejectedBeforeAllocating) {
  // 65536 * 65536 = 4 GiB > kMaxIdxBytes; the file itself is tiny.
  expect_idx_error(write(idx_bytes(0x08, {65536, 65536}, {1, 2, 3})), {"too large"});
  // Four maximal dims would overflow 64 bits if multiplied naively.
  uint32_t m = 0xffffffffu;
  expect_idx_error(write(idx_bytes(0x08, {m, m, m, m}, {})), {"too large"});
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, IdxTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& param_info) {
                           return param_info.param ? std::string("Gzip") : std::string("Plain");
                         });

using IdxFileTest = TempDirTest;

TEST_F(IdxFileTest, MissingFile) {
  std::string path = (dir_ / "no-such-file.idx").string();
  expect_idx_error(path, {"not found"});
}

TEST_F(IdxFileTest, DirectoryIsNotAFile) {
  expect_idx_error(dir_.string(), {"not a regular file"});
}

TEST_F(IdxFileTest, UnreadableFile) {
  if (geteuid() == 0) GTEST_SKIP() << "root can read a mode-000 file";
  fs::path path = dir_ / "locked.idx";
  write_plain(path, idx_bytes(0x08, {1}, {1}));
  fs::permissions(path, fs::perms::none);
  expect_idx_error(path.string(), {"cannot open"});
}

class IdxGzipTest : public TempDirTest {
 protected:
  // A gzipped IDX file with enough varied data that its deflate stream is not trivial.
  fs::path write_good_gzip() {
    Bytes data(4000);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>((i * 7919) >> 3);
    fs::path path = dir_ / "data.idx.gz";
    write_gzip(path, idx_bytes(0x08, {40, 100}, data));
    return path;
  }
};

TEST_F(IdxGzipTest, BadChecksumIsCorruptGzip) {
  fs::path path = write_good_gzip();
  Bytes bytes = read_all(path);
  bytes[bytes.size() - 8] ^= 0xff;  // first byte of the CRC-32 trailer
  write_plain(path, bytes);
  expect_idx_error(path.string(), {"corrupt gzip stream"});
}

TEST_F(IdxGzipTest, CutOffStreamIsCorruptGzip) {
  fs::path path = write_good_gzip();
  Bytes bytes = read_all(path);
  bytes.resize(bytes.size() / 2);
  write_plain(path, bytes);
  expect_idx_error(path.string(), {"corrupt gzip stream"});
}

TEST_F(IdxGzipTest, GarbageAfterGzipHeaderIsCorruptGzip) {
  fs::path path = write_good_gzip();
  Bytes bytes = read_all(path);
  // Keep the 10-byte gzip header, then an invalid deflate block type (binary 11).
  bytes.resize(10);
  for (int i = 0; i < 40; ++i) bytes.push_back(0xff);
  write_plain(path, bytes);
  expect_idx_error(path.string(), {"corrupt gzip stream"});
}

}  // namespace
}  // namespace ls::data
