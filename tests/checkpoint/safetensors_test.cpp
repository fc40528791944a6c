// Tests for the safetensors writer and reader: exact round trips (several dtypes, 0-d and empty
// tensors), golden files built by hand from the spec, a file written by the reference
// implementation (Python safetensors 0.8.0), and every corrupt-file case, each through both the
// file reader and the in-memory reader, with the file's name in the message.
#include "engine/model/checkpoint/safetensors.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_test_util.h"

namespace ls::checkpoint {
namespace {

using namespace testing;  // NOLINT: the checkpoint test helpers
using D = SafetensorsDType;

// 8-byte little-endian length + header text + data.
Bytes file_of(uint64_t header_length, std::string_view header, const Bytes& data) {
  Bytes out;
  for (int i = 0; i < 8; ++i)
    out.push_back(static_cast<std::byte>((header_length >> (8 * i)) & 0xff));
  const Bytes h = to_bytes(header);
  out.insert(out.end(), h.begin(), h.end());
  out.insert(out.end(), data.begin(), data.end());
  return out;
}
Bytes file_of(std::string_view header, const Bytes& data) {
  return file_of(header.size(), header, data);
}

Bytes hex(std::initializer_list<int> values) {
  Bytes out;
  for (int v : values) out.push_back(static_cast<std::byte>(v));
  return out;
}

// ---- golden files, built by hand from the format description --------------------------------

TEST(SafetensorsGolden, SingleTensorMatchesSpecByteForByte) {
  // The reference's own serialization example: 64-byte header (already a multiple of 8).
  const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
  ASSERT_EQ(header.size(), 64u);
  const Bytes expected =
      file_of(header, hex({0, 0, 0,    0,    0, 0, 0x80, 0x3f, 0, 0, 0,    0x40,
                           0, 0, 0x40, 0x40, 0, 0, 0x80, 0x40, 0, 0, 0xa0, 0x40}));
  const std::vector<float> values = {0, 1, 2, 3, 4, 5};
  const Bytes ours = serialize_safetensors({{"attn.0", D::kF32, {1, 2, 3}, bytes_of(values)}});
  EXPECT_EQ(ours, expected);
}

TEST(SafetensorsGolden, PaddingMetadataOrderScalarAndEmptyTensor) {
  // Metadata first; tensors by dtype (I64 > F32 > BF16), then name; header padded with 5 spaces
  // from 195 to 200 bytes so the data starts 8-byte aligned.
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
      R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
      R"("bias":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]}})"
      "     ";
  ASSERT_EQ(header.size(), 200u);
  const Bytes expected = file_of(header, hex({40, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f, 0x00, 0xc0}));
  ASSERT_EQ(expected[0], std::byte{0xc8});

  const std::vector<uint16_t> bias = {f32_to_bf16(1.0f), f32_to_bf16(-2.0f)};
  const std::vector<int64_t> a = {40};
  const std::vector<float> e;
  const std::vector<NamedHostTensor> tensors = {{"bias", D::kBF16, {2}, bytes_of(bias)},
                                                {"e", D::kF32, {0}, bytes_of(e)},
                                                {"a", D::kI64, {}, bytes_of(a)}};
  EXPECT_EQ(serialize_safetensors(tensors, {{"format", "pt"}}), expected);

  const SafetensorsFile file = read_safetensors_from_memory(expected, "golden");
  ASSERT_EQ(file.tensors().size(), 3u);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.at("a").shape, std::vector<int64_t>{});
  EXPECT_EQ(file.at("e").shape, std::vector<int64_t>{0});
  EXPECT_TRUE(file.at("e").data.empty());
  EXPECT_EQ(file.at("bias").dtype, D::kBF16);
}

TEST(SafetensorsGolden, NoTensorsIsEightBytesOfBraces) {
  // From the reference's tests: "{}" padded to 8 bytes.
  EXPECT_EQ(serialize_safetensors({}), file_of("{}      ", {}));
  EXPECT_TRUE(read_safetensors_from_memory(file_of("{}      ", {}), "empty").tensors().empty());
}

// ---- the reference implementation's bytes ---------------------------------------------------

// What `safetensors.numpy.save(recipe(), metadata={"format": "pt"})` (safetensors 0.8.0) wrote;
// regenerate with tests/checkpoint/read_with_safetensors.py --fixture.
const std::string kReferenceHeader =
    R"({"__metadata__":{"format":"pt"},"step":{"dtype":"I64","shape":[],"data_offsets":[0,8]},)"
    R"("empty":{"dtype":"F64","shape":[0,3],"data_offsets":[8,8]},)"
    R"("layer.bias":{"dtype":"F32","shape":[3],"data_offsets":[8,20]},)"
    R"("layer.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[20,44]},)"
    R"("ids":{"dtype":"I32","shape":[3],"data_offsets":[44,56]},)"
    R"("half":{"dtype":"F16","shape":[2],"data_offsets":[56,60]},)"
    R"("mask":{"dtype":"U8","shape":[5],"data_offsets":[60,65]}})"
    "       ";
const Bytes kReferenceData = hex({
    0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xbf, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x10, 0x40, 0x00, 0x00, 0x80, 0xbf, 0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xc0, 0x3f, 0x07, 0x00, 0x00, 0x00,
    0xf9, 0xff, 0xff, 0xff, 0x15, 0xcd, 0x5b, 0x07, 0x00, 0x3c, 0x00, 0xc0, 0x01, 0x00, 0x01, 0x01,
    0xff});

// The recipe of read_with_safetensors.py; the vectors must outlive the returned spans.
struct InteropTensors {
  std::vector<float> weight = {-1, -0.5, 0, 0.5, 1, 1.5};
  std::vector<float> bias = {-1.5, 0, 2.25};
  std::vector<int64_t> step = {40};
  std::vector<int32_t> ids = {7, -7, 123456789};
  std::vector<uint8_t> mask = {1, 0, 1, 1, 255};
  std::vector<uint16_t> half = {0x3c00, 0xc000};  // 1.0, -2.0 in IEEE half
  std::vector<double> empty;
  std::vector<NamedHostTensor> named() const {
    return {{"layer.weight", D::kF32, {2, 3}, bytes_of(weight)},
            {"layer.bias", D::kF32, {3}, bytes_of(bias)},
            {"step", D::kI64, {}, bytes_of(step)},
            {"ids", D::kI32, {3}, bytes_of(ids)},
            {"mask", D::kU8, {5}, bytes_of(mask)},
            {"half", D::kF16, {2}, bytes_of(half)},
            {"empty", D::kF64, {0, 3}, bytes_of(empty)}};
  }
};

TEST(SafetensorsInterop, WriterReproducesTheReferenceBytes) {
  const InteropTensors t;
  const Bytes reference = file_of(kReferenceHeader, kReferenceData);
  EXPECT_EQ(serialize_safetensors(t.named(), {{"format", "pt"}}), reference);
  // For tests/checkpoint/read_with_safetensors.py: LOCKSTEP_SAFETENSORS_INTEROP_FILE=out.safetensors
  if (const char* out = std::getenv("LOCKSTEP_SAFETENSORS_INTEROP_FILE")) {
    write_safetensors(out, t.named(), {{"format", "pt"}});
  }
}

TEST(SafetensorsInterop, ReaderReadsTheReferenceFile) {
  const InteropTensors t;
  const SafetensorsFile file =
      read_safetensors_from_memory(file_of(kReferenceHeader, kReferenceData), "ref");
  ASSERT_EQ(file.tensors().size(), 7u);
  EXPECT_EQ(file.tensors()[0].name, "step");  // offset order
  for (const NamedHostTensor& want : t.named()) {
    const SafetensorsTensor& got = file.at(want.name);
    EXPECT_EQ(got.dtype, want.dtype) << want.name;
    EXPECT_EQ(got.shape, want.shape) << want.name;
    EXPECT_TRUE(std::equal(got.data.begin(), got.data.end(), want.data.begin(), want.data.end()))
        << want.name;
  }
}

// ---- round trips ------------------------------------------------------------------------------

class SafetensorsTest : public TempDirTest {};

TEST_F(SafetensorsTest, RoundTripKeepsExactBytes) {
  std::vector<float> f32(1000);
  for (size_t i = 0; i < f32.size(); ++i) f32[i] = static_cast<float>(i) * 0.37f - 100.0f;
  f32[3] = -0.0f;
  f32[4] = std::numeric_limits<float>::quiet_NaN();
  f32[5] = std::numeric_limits<float>::infinity();
  std::vector<uint16_t> bf16 = {f32_to_bf16(3.5f), 0x7fc1, 0x0001};
  std::vector<int32_t> i32 = {INT32_MIN, -1, 0, INT32_MAX};
  std::vector<int64_t> i64 = {INT64_MIN, INT64_MAX};
  std::vector<uint8_t> u8 = {0, 1, 254, 255, 7};
  std::vector<double> f64 = {3.141592653589793};
  std::vector<uint8_t> flags = {1, 0};
  const std::vector<NamedHostTensor> tensors = {
      {"model.fc1.weight", D::kF32, {10, 100}, bytes_of(f32)},
      {"x.bf16", D::kBF16, {3}, bytes_of(bf16)},
      {"ints", D::kI32, {2, 2}, bytes_of(i32)},
      {"longs", D::kI64, {2}, bytes_of(i64)},
      {"bytes", D::kU8, {5}, bytes_of(u8)},
      {"scalar", D::kF64, {}, bytes_of(f64)},
      {"flags", D::kBool, {2}, bytes_of(flags)},
      {"nothing", D::kF32, {4, 0, 2}, {}},
      {"name with \"quotes\" \\ and \xc3\xa9\n", D::kU8, {1}, bytes_of(u8).first(1)}};
  const SafetensorsMetadata metadata = {{"format", "pt"}, {"note", "tab\there \"q\""}};
  const fs::path path = dir_ / "t.safetensors";
  write_safetensors(path, tensors, metadata);
  EXPECT_EQ(read_all(path), serialize_safetensors(tensors, metadata));

  SafetensorsFile moved = read_safetensors(path);
  const SafetensorsFile file = std::move(moved);  // spans survive a move
  EXPECT_EQ(file.metadata(), metadata);
  ASSERT_EQ(file.tensors().size(), tensors.size());
  for (const NamedHostTensor& want : tensors) {
    const SafetensorsTensor* got = file.find(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(got->dtype, want.dtype);
    EXPECT_EQ(got->shape, want.shape);
    ASSERT_EQ(got->data.size(), want.data.size());
    EXPECT_TRUE(std::equal(got->data.begin(), got->data.end(), want.data.begin())) << want.name;
    // Every tensor's data is aligned to its element size within the file (8-aligned buffer).
    EXPECT_EQ((got->data.data() - file.file_bytes().data()) % safetensors_dtype_size(got->dtype),
              0u);
  }
  EXPECT_EQ(file.find("absent"), nullptr);
  EXPECT_THROW_WITH(file.at("absent"), "t.safetensors", "no tensor named 'absent'");
}

TEST_F(SafetensorsTest, DTypeNamesRoundTrip) {
  for (int i = 0; i <= static_cast<int>(D::kU64); ++i) {
    const auto d = static_cast<D>(i);
    EXPECT_EQ(parse_safetensors_dtype(safetensors_dtype_name(d)), d);
  }
  EXPECT_EQ(parse_safetensors_dtype("f32"), std::nullopt);
  EXPECT_EQ(safetensors_dtype_size(D::kBF16), 2u);
  EXPECT_EQ(to_safetensors_dtype(DType::kBF16), D::kBF16);
  EXPECT_EQ(to_safetensors_dtype(DType::kF32), D::kF32);
  EXPECT_EQ(to_safetensors_dtype(DType::kI32), D::kI32);
}

TEST_F(SafetensorsTest, WriterRefusesBadTensors) {
  const std::vector<float> four(4);
  const auto data = bytes_of(four);
  EXPECT_THROW_WITH(serialize_safetensors({{"w", D::kF32, {3}, data}}), "'w'", "needs 12 bytes",
                    "has 16");
  EXPECT_THROW_WITH(serialize_safetensors({{"w", D::kF32, {-4}, data}}), "negative extent -4");
  EXPECT_THROW_WITH(serialize_safetensors({{"w", D::kF32, {4}, data}, {"w", D::kI32, {4}, data}}),
                    "two tensors are named 'w'");
  EXPECT_THROW_WITH(serialize_safetensors({{"__metadata__", D::kF32, {4}, data}}), "reserved");
  EXPECT_THROW_WITH(serialize_safetensors({{"", D::kF32, {4}, data}}), "reserved or empty");
  EXPECT_THROW_WITH(serialize_safetensors({{"bad\xff", D::kF32, {4}, data}}), "not valid UTF-8");
  EXPECT_THROW_WITH(serialize_safetensors({}, {{"k", "\xc0"}}), "not valid UTF-8");
  EXPECT_THROW_WITH(
      serialize_safetensors({{"w", D::kF32, {INT64_MAX, INT64_MAX}, data}}), "too many");
  // A failed write leaves no file and no temporary behind.
  EXPECT_ANY_THROW(write_safetensors(dir_ / "x.safetensors", {{"w", D::kF32, {3}, data}}));
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ---- corrupt files ------------------------------------------------------------------------------

struct Corrupt {
  std::string name;
  Bytes file;
  std::vector<std::string> fragments;
};

// Valid: w = F32[2] at [0, 8), v = U8[3] at [8, 11).
std::string entries(const std::string& w_offsets, const std::string& v_offsets) {
  return R"({"w":{"dtype":"F32","shape":[2],"data_offsets":)" + w_offsets +
         R"(},"v":{"dtype":"U8","shape":[3],"data_offsets":)" + v_offsets + "}}";
}

std::vector<Corrupt> corrupt_cases() {
  const Bytes data11(11, std::byte{1});
  const std::string good = entries("[0,8]", "[8,11]");
  auto one = [](const std::string& body) { return R"({"w":)" + body + "}"; };
  std::vector<Corrupt> c = {
      {"empty file", {}, {"truncated: 0 bytes", "8-byte header length"}},
      {"short file", hex({1, 0, 0}), {"truncated: 3 bytes"}},
      {"header over cap",
       file_of((uint64_t{100} << 20) + 1, "{}", {}),
       {"header length 104857601", "cap"}},
      {"header length 2^64-1", file_of(UINT64_MAX, "{}", {}), {"larger than the cap"}},
      {"header beyond file",
       file_of(1000, good, data11),
       {"header length 1000 is larger than the file"}},
      {"zero header", file_of(0, "", {}), {"header: byte 0: expected a value"}},
      {"bad json",
       file_of(R"({"w":{"dtype":"F32",,}})", {}),
       {"header: byte 20: expected a string key"}},
      {"not an object", file_of("[1]", {}), {"expected a JSON object, got an array"}},
      {"invalid utf8", file_of("{\"w\xff\":1}", {}), {"invalid UTF-8"}},
      {"depth bomb", file_of(std::string(200, '['), {}), {"nesting deeper than 64"}},
      {"entry not object", file_of(one("[1]"), {}), {"tensor 'w' must be an object"}},
      {"unknown dtype",
       file_of(one(R"({"dtype":"C64","shape":[],"data_offsets":[0,8]})"), Bytes(8)),
       {"unknown or unsupported dtype 'C64'"}},
      {"dtype not string",
       file_of(one(R"({"dtype":4,"shape":[],"data_offsets":[0,4]})"), Bytes(4)),
       {"dtype of tensor 'w' must be a string"}},
      {"shape not array",
       file_of(one(R"({"dtype":"U8","shape":2,"data_offsets":[0,2]})"), Bytes(2)),
       {"shape of tensor 'w' must be an array"}},
      {"negative extent",
       file_of(one(R"({"dtype":"U8","shape":[-2],"data_offsets":[0,2]})"), Bytes(2)),
       {"shape of tensor 'w'", "non-negative"}},
      {"fractional extent",
       file_of(one(R"({"dtype":"U8","shape":[2.0],"data_offsets":[0,2]})"), Bytes(2)),
       {"integer"}},
      {"extent beyond int64",
       file_of(one(R"({"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,2]})"),
               Bytes(2)),
       {"beyond 2^63-1"}},
      {"element count overflow",
       file_of(one(R"({"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]})"),
               Bytes(8)),
       {"more elements than fit in 64 bits"}},
      {"shape/bytes mismatch",
       file_of(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]},)"
               R"("v":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})",
               data11),
       {"tensor 'w'", "needs 12 bytes", "hold 8", "does not match"}},
      {"offsets out of range",
       file_of(entries("[0,8]", "[8,11]"), Bytes(10)),
       {"out of range", "truncated"}},
      {"offsets beyond 2^64",
       file_of(entries("[0,8]", "[8,18446744073709551616]"), data11),
       {"64 bits"}},
      {"offsets reversed",
       file_of(one(R"({"dtype":"U8","shape":[0],"data_offsets":[3,0]})"), Bytes(3)),
       {"reversed: [3, 0]"}},
      {"offsets not a pair",
       file_of(one(R"({"dtype":"U8","shape":[0],"data_offsets":[0,0,0]})"), {}),
       {"must be [begin, end], got 3 numbers"}},
      {"overlapping offsets",
       file_of(entries("[0,8]", "[4,7]"), data11),
       {"tensor 'v' [4, 7) overlaps tensor 'w'"}},
      {"identical offsets", file_of(entries("[0,8]", "[0,3]"), Bytes(8)), {"overlaps"}},
      {"gap between tensors",
       file_of(entries("[0,8]", "[9,12]"), Bytes(12)),
       {"gap", "bytes [8, 9)"}},
      {"gap at the start", file_of(entries("[1,9]", "[9,12]"), Bytes(12)), {"gap", "bytes [0, 1)"}},
      {"duplicate names",
       file_of(R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
               R"("w":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})",
               {}),
       {"duplicate key \"w\""}},
      {"truncated buffer",
       file_of(good, Bytes(9)),
       {"tensor 'v'", "out of range", "holds 9 bytes"}},
      {"trailing bytes", file_of(good, Bytes(12)), {"trailing bytes", "cover 11", "1 more"}},
      {"unknown field",
       file_of(one(R"({"dtype":"U8","shape":[0],"data_offsets":[0,0],"x":1})"), {}),
       {"unknown field 'x'"}},
      {"missing field", file_of(one(R"({"dtype":"U8","shape":[0]})"), {}), {"lacks data_offsets"}},
      {"metadata not object",
       file_of(R"({"__metadata__":3})", {}),
       {"__metadata__ must be an object"}},
      {"metadata value not string",
       file_of(R"({"__metadata__":{"k":1}})", {}),
       {"value of 'k' must be a string"}},
  };
  return c;
}

TEST(SafetensorsCorrupt, InMemoryReaderRefusesEveryCase) {
  for (const Corrupt& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const std::string message =
        error_of([&] { read_safetensors_from_memory(c.file, "mem.safetensors"); });
    EXPECT_TRUE(contains_all(message, {"mem.safetensors"}));
    for (const std::string& f : c.fragments) EXPECT_TRUE(contains_all(message, {f}));
  }
}

TEST_F(SafetensorsTest, FileReaderRefusesEveryCase) {
  for (const Corrupt& c : corrupt_cases()) {
    SCOPED_TRACE(c.name);
    const fs::path path = dir_ / "bad.safetensors";
    write_all(path, c.file);
    const std::string message = error_of([&] { read_safetensors(path); });
    EXPECT_TRUE(contains_all(message, {path.string()}));
    for (const std::string& f : c.fragments) EXPECT_TRUE(contains_all(message, {f}));
  }
}

TEST_F(SafetensorsTest, LimitsAndFileErrors) {
  const std::vector<float> v = {1, 2};
  const fs::path path = dir_ / "ok.safetensors";
  write_safetensors(path, {{"w", D::kF32, {2}, bytes_of(v)}});
  SafetensorsLimits tight;
  tight.max_header_bytes = 16;
  EXPECT_THROW_WITH(read_safetensors(path, tight), "larger than the cap of 16");
  SafetensorsLimits small_file;
  small_file.max_file_bytes = 32;
  EXPECT_THROW_WITH(read_safetensors(path, small_file), "more than the limit of 32");
  EXPECT_THROW_WITH(read_safetensors_from_memory(read_all(path), "m", small_file), "limit of 32");
  EXPECT_THROW_WITH(read_safetensors(dir_ / "missing.safetensors"), "missing.safetensors",
                    "cannot open");
  EXPECT_THROW_WITH(read_safetensors(dir_), "not a regular file");
  EXPECT_NO_THROW(read_safetensors(path));
}

}  // namespace
}  // namespace ls::checkpoint
