// Tests for ls::parse_json: valid documents (values, key order, escapes, UTF-8), exact number
// conversions, every kind of malformed input (with the byte offset in the message), depth and
// size bombs, huge numbers, and random mutations that must fail cleanly or parse.
#include "engine/core/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "checkpoint/checkpoint_test_util.h"

namespace ls {
namespace {

using checkpoint::testing::contains_all;
using checkpoint::testing::error_of;

JsonValue parse(std::string_view text) { return parse_json(text, "test.json"); }

TEST(JsonReader, ParsesScalars) {
  EXPECT_TRUE(parse("null").is_null());
  EXPECT_TRUE(parse("true").as_bool());
  EXPECT_FALSE(parse(" false ").as_bool());
  EXPECT_EQ(parse("\"hi\"").as_string(), "hi");
  EXPECT_EQ(parse("0").as_int64(), 0);
  EXPECT_EQ(parse("-12").as_int64(), -12);
  EXPECT_EQ(parse("-0").number_text(), "-0");
  EXPECT_DOUBLE_EQ(parse("1.5e-3").as_double(), 1.5e-3);
  EXPECT_DOUBLE_EQ(parse("1E+2").as_double(), 100.0);
  EXPECT_DOUBLE_EQ(parse("-0.25").as_double(), -0.25);
  EXPECT_EQ(parse("\t\r\n 7 \n").as_int64(), 7);
}

TEST(JsonReader, ParsesNestedDocumentsKeepingKeyOrder) {
  const JsonValue v = parse(R"({"z": 1, "a": [true, null, {"k": "v"}, []], "m": {}})");
  ASSERT_TRUE(v.is_object());
  const auto& members = v.members();
  ASSERT_EQ(members.size(), 3u);
  EXPECT_EQ(members[0].first, "z");
  EXPECT_EQ(members[1].first, "a");
  EXPECT_EQ(members[2].first, "m");
  const auto& a = v.find("a")->items();
  ASSERT_EQ(a.size(), 4u);
  EXPECT_TRUE(a[0].as_bool());
  EXPECT_TRUE(a[1].is_null());
  EXPECT_EQ(a[2].find("k")->as_string(), "v");
  EXPECT_TRUE(a[3].items().empty());
  EXPECT_TRUE(v.find("m")->members().empty());
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(v.find("a")->offset(), 14u);
}

TEST(JsonReader, DecodesEscapesAndUtf8) {
  EXPECT_EQ(parse(R"("\" \\ \/ \b \f \n \r \t")").as_string(), "\" \\ / \b \f \n \r \t");
  EXPECT_EQ(parse(R"("\u00e9\u20AC")").as_string(), "\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(parse(R"("\ud83d\ude00")").as_string(), "\xf0\x9f\x98\x80");  // surrogate pair
  EXPECT_EQ(parse(R"("\u0000")").as_string(), std::string(1, '\0'));
  EXPECT_EQ(parse("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"").as_string(),
            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
  EXPECT_EQ(parse("\"\x7f\"").as_string(), "\x7f");
}

TEST(JsonReader, IntegerConversionsAreExact) {
  EXPECT_EQ(parse("9223372036854775807").as_int64(), INT64_MAX);
  EXPECT_EQ(parse("-9223372036854775808").as_int64(), INT64_MIN);
  EXPECT_EQ(parse("18446744073709551615").as_uint64(), UINT64_MAX);
  EXPECT_TRUE(contains_all(error_of([] { parse("9223372036854775808").as_int64(); }),
                           {"byte 0", "fits in 64 bits", "9223372036854775808"}));
  EXPECT_TRUE(
      contains_all(error_of([] { parse("18446744073709551616").as_uint64(); }), {"64 bits"}));
  EXPECT_TRUE(contains_all(error_of([] { parse("-1").as_uint64(); }), {"non-negative"}));
  EXPECT_TRUE(contains_all(error_of([] { parse("1.0").as_int64(); }), {"integer", "1.0"}));
  EXPECT_TRUE(contains_all(error_of([] { parse("1e2").as_uint64(); }), {"integer", "1e2"}));
}

TEST(JsonReader, HugeNumbersParseButDoNotConvert) {
  const std::string digits(5000, '9');
  const JsonValue v = parse(digits);
  EXPECT_EQ(v.number_text(), digits);
  EXPECT_TRUE(contains_all(error_of([&] { v.as_double(); }), {"out of the range of a double"}));
  EXPECT_TRUE(contains_all(error_of([&] { v.as_int64(); }), {"64 bits"}));
  EXPECT_TRUE(
      contains_all(error_of([] { parse("1e999999999999").as_double(); }), {"out of the range"}));
  EXPECT_TRUE(contains_all(error_of([] { parse("-1e400").as_double(); }), {"out of the range"}));
  EXPECT_TRUE(contains_all(error_of([] { parse("1e-400").as_double(); }), {"out of the range"}));
  EXPECT_DOUBLE_EQ(parse("1.7976931348623157e308").as_double(), 1.7976931348623157e308);
  EXPECT_DOUBLE_EQ(parse("4.9e-324").as_double(), 4.9e-324);  // subnormals are in range
}

TEST(JsonReader, AccessorsNameTheKindAndOffset) {
  const JsonValue v = parse(R"([1, "x"])");
  EXPECT_TRUE(contains_all(error_of([&] { v.items()[0].as_string(); }),
                           {"byte 1", "expected a string, got a number"}));
  EXPECT_TRUE(contains_all(error_of([&] { v.items()[1].as_int64(); }),
                           {"byte 4", "expected a number, got a string"}));
  EXPECT_TRUE(contains_all(error_of([&] { v.members(); }), {"expected an object, got an array"}));
  EXPECT_TRUE(contains_all(error_of([&] { v.find("k"); }), {"expected an object"}));
}

TEST(JsonReader, ErrorMessageFormat) {
  EXPECT_EQ(error_of([] { parse_json(R"({"a" 1})", "meta.json"); }),
            "meta.json: byte 5: expected ':', found '1'");
  EXPECT_EQ(error_of([] { parse_json("", "meta.json"); }),
            "meta.json: byte 0: expected a value, found end of input");
}

struct Malformed {
  const char* name;
  std::string text;
  std::string fragment;  // expected in the message, after "test.json: byte N: "
  size_t offset;
};

class JsonMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(JsonMalformed, IsRefusedWithOffset) {
  const Malformed& m = GetParam();
  const std::string message = error_of([&] { parse(m.text); });
  EXPECT_TRUE(
      contains_all(message, {"test.json: byte " + std::to_string(m.offset) + ": ", m.fragment}));
}

std::string nested(const std::string& open, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += open;
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, JsonMalformed,
    ::testing::Values(
        Malformed{"Empty", "", "expected a value, found end of input", 0},
        Malformed{"Blank", "  \n", "expected a value", 3},
        Malformed{"UnclosedObject", "{", "expected a string key, found end of input", 1},
        Malformed{"UnclosedArray", "[1", "expected ',' or ']'", 2},
        Malformed{"TrailingCommaArray", "[1,]", "expected a value, found ']'", 3},
        Malformed{"TrailingCommaObject", R"({"a":1,})", "expected a string key, found '}'", 7},
        Malformed{"DoubleComma", "[1,,2]", "expected a value, found ','", 3},
        Malformed{"MissingComma", "[1 2]", "expected ',' or ']', found '2'", 3},
        Malformed{"MissingColon", R"({"a" 1})", "expected ':', found '1'", 5},
        Malformed{"UnquotedKey", "{a:1}", "expected a string key, found 'a'", 1},
        Malformed{"NumberKey", "{1:1}", "expected a string key", 1},
        Malformed{"SingleQuotes", "'a'", "expected a value, found '''", 0},
        Malformed{"LeadingZero", "01", "leading zeros", 0},
        Malformed{"NegativeLeadingZero", "-012", "leading zeros", 0},
        Malformed{"LoneMinus", "-", "expected a digit in the number", 1},
        Malformed{"PlusSign", "+1", "expected a value", 0},
        Malformed{"LeadingDot", ".5", "expected a value", 0},
        Malformed{"TrailingDot", "1.", "expected a digit after the decimal point", 2},
        Malformed{"EmptyExponent", "1e", "expected a digit in the exponent", 2},
        Malformed{"SignOnlyExponent", "1e+", "expected a digit in the exponent", 3},
        Malformed{"NaN", "NaN", "expected a value", 0},
        Malformed{"Infinity", "-Infinity", "expected a digit", 1},
        Malformed{"Hex", "0x10", "unexpected 'x' after the JSON value", 1},
        Malformed{"TruncatedTrue", "tru", "expected a value", 0},
        Malformed{"CapitalNull", "Null", "expected a value", 0},
        Malformed{"TwoValues", "1 2", "unexpected '2' after the JSON value", 2},
        Malformed{"TrailingGarbage", "{} x", "unexpected 'x'", 3},
        Malformed{"TrailingNul", std::string("{}\0", 3), "unexpected byte 0x00", 2},
        Malformed{"Comment", "[1] // c", "unexpected '/'", 4},
        Malformed{"Bom", "\xef\xbb\xbf{}", "expected a value, found byte 0xef", 0},
        Malformed{"UnterminatedString", "\"abc", "unterminated string", 0},
        Malformed{"UnterminatedEscape", "\"ab\\", "unterminated string", 0},
        Malformed{"BadEscape", R"("a\x")", "invalid escape \\'x'", 2},
        Malformed{"RawTab", "\"a\tb\"", "control character 0x09", 2},
        Malformed{"RawNewline", "\"a\nb\"", "control character 0x0a", 2},
        Malformed{"ShortUnicode", R"("\u12")", "expected a hex digit", 5},
        Malformed{"BadHex", R"("\u12g4")", "expected a hex digit", 5},
        Malformed{"LoneHighSurrogate", R"("\ud800")", "unpaired high surrogate", 1},
        Malformed{"HighThenLetter", R"("\ud800x")", "unpaired high surrogate", 1},
        Malformed{"HighThenHigh", R"("\ud800\ud800")", "unpaired high surrogate", 1},
        Malformed{"LoneLowSurrogate", R"("\udc00")", "unpaired low surrogate", 1},
        Malformed{"InvalidUtf8Byte", "\"\xff\"", "invalid UTF-8 byte 0xff", 1},
        Malformed{"ContinuationFirst", "\"\x80\"", "invalid UTF-8 byte 0x80", 1},
        Malformed{"OverlongSlash", "\"\xc0\xaf\"", "invalid UTF-8 byte 0xc0", 1},
        Malformed{"Overlong3", "\"\xe0\x80\xaf\"", "overlong", 1},
        Malformed{"EncodedSurrogate", "\"\xed\xa0\x80\"", "surrogate", 1},
        Malformed{"BeyondUnicode", "\"\xf4\x90\x80\x80\"", "beyond U+10FFFF", 1},
        Malformed{"TruncatedUtf8", "\"\xe2\x82\"", "invalid UTF-8 continuation byte 0x22", 3},
        Malformed{"Utf8AtEnd", "\"\xe2", "truncated UTF-8 sequence", 1},
        Malformed{"DuplicateKey", R"({"a":1,"b":2,"a":3})", "duplicate key \"a\"", 17},
        Malformed{"NestedDuplicate", R"([{"k":{},"k":[]}])", "duplicate key \"k\"", 13},
        Malformed{"ArrayBomb", nested("[", 100000), "nesting deeper than 64 levels", 64},
        Malformed{"ObjectBomb", nested("{\"a\":", 100000), "nesting deeper than 64 levels", 320}),
    [](const ::testing::TestParamInfo<Malformed>& info) { return info.param.name; });

TEST(JsonReader, DepthLimitIsExact) {
  EXPECT_NO_THROW(parse(nested("[", 64) + nested("]", 64)));
  EXPECT_TRUE(contains_all(error_of([] { parse(nested("[", 65) + nested("]", 65)); }),
                           {"nesting deeper than 64"}));
  JsonLimits shallow;
  shallow.max_depth = 2;
  EXPECT_NO_THROW(parse_json("[[1]]", "t", shallow));
  EXPECT_NO_THROW(parse_json("[[], {}]", "t", shallow));
  EXPECT_ANY_THROW(parse_json("[[[]]]", "t", shallow));  // an empty container is a level too
}

TEST(JsonReader, SizeAndValueCaps) {
  JsonLimits small;
  small.max_bytes = 8;
  EXPECT_NO_THROW(parse_json("[1,2,3]", "t", small));
  EXPECT_TRUE(contains_all(error_of([&] { parse_json("[1,2,3,4]", "t", small); }),
                           {"t: byte 0: input is 9 bytes, more than the limit of 8"}));
  JsonLimits few;
  few.max_values = 4;
  EXPECT_NO_THROW(parse_json("[1,2,3]", "t", few));
  EXPECT_TRUE(contains_all(error_of([&] { parse_json("[1,2,3,4]", "t", few); }),
                           {"more than 4 values"}));
}

TEST(JsonReader, LargeFlatDocumentsParse) {
  std::string text = "[";
  for (int i = 0; i < 200000; ++i) {
    if (i) text += ',';
    text += std::to_string(i);
  }
  text += "]";
  JsonLimits limits;
  limits.max_bytes = text.size();
  const JsonValue v = parse_json(text, "big", limits);
  ASSERT_EQ(v.items().size(), 200000u);
  EXPECT_EQ(v.items()[199999].as_int64(), 199999);
}

// Random byte edits of a valid document must either parse or raise ls::Error: never crash,
// hang or throw anything else (the fuzzer in fuzz/ does this at scale).
TEST(JsonReader, RandomMutationsFailCleanly) {
  const std::string base =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
      R"("s":"\u00e9\ud83d\ude00\n","n":[-1.5e3,0,true,false,null,{}]})";
  ASSERT_NO_THROW(parse(base));
  std::mt19937 rng(1234);
  const std::string alphabet = "{}[]\",:\\u0123456789eE.-+ tfnrlsa\x80\xc3\xff";
  int parsed = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(pos, 1 + rng() % 3); break;
        default: text.insert(pos, 1, alphabet[rng() % alphabet.size()]);
      }
      if (text.empty()) text = "x";
    }
    try {
      parse(text);
      ++parsed;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace ls
