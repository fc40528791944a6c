// A strict JSON parser (RFC 8259) for untrusted input: safetensors headers and checkpoint
// meta.json. Contract: parse_json accepts exactly one JSON text (surrounding whitespace allowed),
// rejects everything else with an ls::Error "SOURCE: byte N: what was expected", and never
// recurses: nesting depth, input size and value count are capped by JsonLimits, so hostile input
// costs at most O(input) time and memory. Strings must be valid UTF-8 (escapes included: no lone
// surrogates); duplicate keys in one object are an error; objects keep their key order.
// Thread-safety: pure functions; JsonValue is an immutable value once parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ls {

class JsonValue {
 public:
  enum class Kind : uint8_t { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  Kind kind() const { return kind_; }
  // Byte offset of the value's first character in the parsed text (for error messages).
  size_t offset() const { return offset_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // Accessors raise ls::Error ("byte N: expected a string, got a number") on the wrong kind.
  bool as_bool() const;
  const std::string& as_string() const;
  // Numbers keep their literal text; the conversions are exact or raise ls::Error:
  // as_int64/as_uint64 need an integer literal (no fraction or exponent) in range,
  // as_double needs a value within double's range (1e999 is an error, not infinity).
  const std::string& number_text() const;
  int64_t as_int64() const;
  uint64_t as_uint64() const;
  double as_double() const;
  const std::vector<JsonValue>& items() const;  // array elements
  const std::vector<Member>& members() const;   // object members, in document order
  // The member named `key` of an object, or nullptr (raises if this is not an object).
  const JsonValue* find(std::string_view key) const;

 private:
  friend class JsonParser;
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  size_t offset_ = 0;
  std::string text_;                // string contents, or a number's literal
  std::vector<JsonValue> items_;    // array elements
  std::vector<Member> members_;     // object members
};

std::string_view json_kind_name(JsonValue::Kind kind);  // "null", "a number", ...

struct JsonLimits {
  size_t max_bytes = size_t{1} << 20;     // longer input is refused before parsing
  int max_depth = 64;                     // arrays/objects nested deeper are refused
  size_t max_values = size_t{1} << 22;    // total values (each ~100 bytes in memory)
};

// Parses `text`; `source` names it in error messages (e.g. "meta.json").
JsonValue parse_json(std::string_view text, std::string_view source, const JsonLimits& limits = {});

}  // namespace ls
