// parse_json and JsonValue (see engine/core/json_reader.h). The parser is an explicit state machine
// over a stack of open containers, so nesting costs heap, never call stack.
#include "engine/core/json_reader.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <limits>

#include <lockstep/error.h>

namespace ls {

std::string_view json_kind_name(JsonValue::Kind kind) {
  switch (kind) {
    case JsonValue::Kind::kNull: return "null";
    case JsonValue::Kind::kBool: return "a boolean";
    case JsonValue::Kind::kNumber: return "a number";
    case JsonValue::Kind::kString: return "a string";
    case JsonValue::Kind::kArray: return "an array";
    case JsonValue::Kind::kObject: return "an object";
  }
  return "?";
}

namespace {

void check_kind(const JsonValue& v, JsonValue::Kind want) {
  LS_CHECK_IO(v.kind() == want, "byte ", v.offset(), ": expected ", json_kind_name(want), ", got ",
              json_kind_name(v.kind()));
}

bool is_integer_literal(const std::string& text) {
  return text.find_first_of(".eE") == std::string::npos;
}

// "'x'", "byte 0x01" or "end of input": what the parser found where it expected something else.
std::string describe_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return "end of input";
  const auto c = static_cast<unsigned char>(text[pos]);
  char buf[16];
  if (c >= 0x20 && c < 0x7f) {
    std::snprintf(buf, sizeof buf, "'%c'", c);
  } else {
    std::snprintf(buf, sizeof buf, "byte 0x%02x", c);
  }
  return buf;
}

}  // namespace

bool JsonValue::as_bool() const {
  check_kind(*this, Kind::kBool);
  return bool_;
}

const std::string& JsonValue::as_string() const {
  check_kind(*this, Kind::kString);
  return text_;
}

const std::string& JsonValue::number_text() const {
  check_kind(*this, Kind::kNumber);
  return text_;
}

int64_t JsonValue::as_int64() const {
  check_kind(*this, Kind::kNumber);
  int64_t out = 0;
  const char* end = text_.data() + text_.size();
  auto [ptr, ec] = std::from_chars(text_.data(), end, out);
  LS_CHECK_IO(is_integer_literal(text_) && ec == std::errc() && ptr == end, "byte ", offset_,
              ": expected an integer that fits in 64 bits, got ", text_);
  return out;
}

uint64_t JsonValue::as_uint64() const {
  check_kind(*this, Kind::kNumber);
  uint64_t out = 0;
  const char* end = text_.data() + text_.size();
  auto [ptr, ec] = std::from_chars(text_.data(), end, out);  // rejects a leading '-'
  LS_CHECK_IO(is_integer_literal(text_) && ec == std::errc() && ptr == end, "byte ", offset_,
              ": expected a non-negative integer that fits in 64 bits, got ", text_);
  return out;
}

double JsonValue::as_double() const {
  check_kind(*this, Kind::kNumber);
  double out = 0;
  const char* end = text_.data() + text_.size();
  auto [ptr, ec] = std::from_chars(text_.data(), end, out);
  LS_CHECK_IO(ec == std::errc() && ptr == end, "byte ", offset_, ": number ", text_,
              " is out of the range of a double");
  return out;
}

const std::vector<JsonValue>& JsonValue::items() const {
  check_kind(*this, Kind::kArray);
  return items_;
}

const std::vector<JsonValue::Member>& JsonValue::members() const {
  check_kind(*this, Kind::kObject);
  return members_;
}

const JsonValue* JsonValue::find(std::string_view key) const {
  check_kind(*this, Kind::kObject);
  for (const Member& m : members_) {
    if (m.first == key) return &m.second;
  }
  return nullptr;
}

// The parser: one pass over the text with an explicit stack of open containers. Pointers on the
// stack stay valid because only the innermost open container ever grows.
class JsonParser {
 public:
  JsonParser(std::string_view text, std::string_view source, const JsonLimits& limits)
      : text_(text), source_(source), limits_(limits) {}

  JsonValue parse() {
    if (text_.size() > limits_.max_bytes) {
      fail_at(0, "input is ", text_.size(), " bytes, more than the limit of ", limits_.max_bytes);
    }
    JsonValue root;
    JsonValue* slot = &root;  // where the next value goes
    std::vector<JsonValue*> open;
    bool need_value = true;
    while (true) {
      if (need_value) {
        skip_ws();
        need_value = begin_value(*slot, open);
        if (need_value) slot = next_slot(open);  // a non-empty container was opened
        continue;
      }
      if (open.empty()) break;
      skip_ws();
      JsonValue& top = *open.back();
      const bool is_object = top.kind_ == JsonValue::Kind::kObject;
      const char close = is_object ? '}' : ']';
      if (consume(',')) {
        slot = next_slot(open);
        need_value = true;
      } else if (consume(close)) {
        if (is_object) check_unique_keys(top);
        open.pop_back();
      } else {
        fail_at(pos_, "expected ',' or '", close, "', found ", describe_at(text_, pos_));
      }
    }
    skip_ws();
    if (pos_ != text_.size()) {
      fail_at(pos_, "unexpected ", describe_at(text_, pos_), " after the JSON value");
    }
    return root;
  }

 private:
  template <typename... Parts>
  [[noreturn]] void fail_at(size_t pos, Parts&&... parts) {
    LS_THROW_IO(source_, ": byte ", pos, ": ", std::forward<Parts>(parts)...);
  }

  bool consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!consume(c)) fail_at(pos_, "expected '", c, "', found ", describe_at(text_, pos_));
  }

  void skip_ws() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  void count_value() {
    if (++values_ > limits_.max_values) {
      fail_at(pos_, "more than ", limits_.max_values, " values: the document is too large");
    }
  }

  // Parses the value starting at pos_ into `v`. Scalars are complete on return (false). For '['
  // or '{' the container is pushed on `open`; returns true when it is non-empty (a value, or a
  // key then a value, must follow) and false when it was empty ("[]", "{}").
  bool begin_value(JsonValue& v, std::vector<JsonValue*>& open) {
    count_value();
    v.offset_ = pos_;
    if (pos_ >= text_.size()) fail_at(pos_, "expected a value, found end of input");
    const char c = text_[pos_];
    if (c == '[' || c == '{') {
      if (static_cast<int>(open.size()) >= limits_.max_depth) {
        fail_at(pos_, "nesting deeper than ", limits_.max_depth, " levels");
      }
      ++pos_;
      v.kind_ = c == '[' ? JsonValue::Kind::kArray : JsonValue::Kind::kObject;
      skip_ws();
      if (consume(c == '[' ? ']' : '}')) return false;
      open.push_back(&v);
      return true;
    }
    if (c == '"') {
      v.kind_ = JsonValue::Kind::kString;
      v.text_ = parse_string();
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      v.kind_ = JsonValue::Kind::kNumber;
      v.text_ = parse_number();
    } else if (match_literal("true")) {
      v.kind_ = JsonValue::Kind::kBool;
      v.bool_ = true;
    } else if (match_literal("false")) {
      v.kind_ = JsonValue::Kind::kBool;
    } else if (!match_literal("null")) {
      fail_at(pos_, "expected a value, found ", describe_at(text_, pos_));
    }
    return false;
  }

  // Appends an element to the innermost open container and returns it; for an object, parses
  // the key and ':' first.
  JsonValue* next_slot(std::vector<JsonValue*>& open) {
    JsonValue& top = *open.back();
    if (top.kind_ == JsonValue::Kind::kArray) return &top.items_.emplace_back();
    skip_ws();
    if (pos_ >= text_.size() || text_[pos_] != '"') {
      fail_at(pos_, "expected a string key, found ", describe_at(text_, pos_));
    }
    std::string key = parse_string();
    skip_ws();
    expect(':');
    skip_ws();
    return &top.members_.emplace_back(std::move(key), JsonValue()).second;
  }

  // RFC 8259 says names SHOULD be unique; a header or meta.json with a repeated name is
  // ambiguous, so it is an error (reported at the repeated member's value). O(n log n) per
  // object, run when the object closes.
  void check_unique_keys(const JsonValue& object) {
    const auto& members = object.members_;
    if (members.size() < 2) return;
    std::vector<size_t> order(members.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return members[a].first < members[b].first; });
    for (size_t i = 1; i < order.size(); ++i) {
      const auto& later = members[order[i]];
      if (later.first == members[order[i - 1]].first) {
        fail_at(later.second.offset_, "duplicate key ", json_escape_for_message(later.first));
      }
    }
  }

  static std::string json_escape_for_message(const std::string& key) {
    std::string out = "\"";
    for (size_t i = 0; i < key.size() && i < 64; ++i) {
      const auto c = static_cast<unsigned char>(key[i]);
      out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
    }
    return out + (key.size() > 64 ? "...\"" : "\"");
  }

  bool match_literal(std::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }

  // number = [ minus ] int [ frac ] [ exp ]; returns the literal text.
  std::string parse_number() {
    const size_t start = pos_;
    consume('-');
    auto digit_at = [&](size_t p) {
      return p < text_.size() && text_[p] >= '0' && text_[p] <= '9';
    };
    auto digits = [&](const char* what) {
      if (!digit_at(pos_))
        fail_at(pos_, "expected a digit ", what, ", found ", describe_at(text_, pos_));
      while (digit_at(pos_)) ++pos_;
    };
    if (consume('0')) {
      if (digit_at(pos_)) fail_at(start, "numbers must not have leading zeros");
    } else {
      digits("in the number");
    }
    if (consume('.')) digits("after the decimal point");
    if (consume('e') || consume('E')) {
      if (!consume('+')) consume('-');
      digits("in the exponent");
    }
    return std::string(text_.substr(start, pos_ - start));
  }

  uint32_t parse_hex4() {
    uint32_t out = 0;
    for (int i = 0; i < 4; ++i, ++pos_) {
      if (pos_ >= text_.size()) fail_at(pos_, "truncated \\u escape");
      const char c = text_[pos_];
      uint32_t d;
      if (c >= '0' && c <= '9') d = c - '0';
      else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      else
        fail_at(pos_, "expected a hex digit in the \\u escape, found ", describe_at(text_, pos_));
      out = out * 16 + d;
    }
    return out;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xc0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xe0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  // The code point after a '\u' (pos_ at the first hex digit), pairing surrogates.
  uint32_t parse_unicode_escape(size_t escape_at) {
    uint32_t cp = parse_hex4();
    if (cp >= 0xdc00 && cp <= 0xdfff) fail_at(escape_at, "unpaired low surrogate in \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (!match_literal("\\u")) fail_at(escape_at, "unpaired high surrogate in \\u escape");
      const uint32_t low = parse_hex4();
      if (low < 0xdc00 || low > 0xdfff) fail_at(escape_at, "unpaired high surrogate in \\u escape");
      cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
    }
    return cp;
  }

  // Copies one raw UTF-8 sequence starting at pos_ (a byte >= 0x80), checking it is well formed:
  // no overlong forms, no surrogates, nothing above U+10FFFF.
  void copy_utf8_sequence(std::string& out) {
    const size_t at = pos_;
    const auto b0 = static_cast<unsigned char>(text_[pos_]);
    int len;
    uint32_t cp, min;
    if (b0 >= 0xc2 && b0 <= 0xdf) { len = 2; cp = b0 & 0x1f; min = 0x80; }
    else if (b0 >= 0xe0 && b0 <= 0xef) { len = 3; cp = b0 & 0x0f; min = 0x800; }
    else if (b0 >= 0xf0 && b0 <= 0xf4) { len = 4; cp = b0 & 0x07; min = 0x10000; }
    else fail_at(at, "invalid UTF-8 byte 0x", hex2(b0), " in a string");
    if (text_.size() - pos_ < static_cast<size_t>(len)) fail_at(at, "truncated UTF-8 sequence");
    for (int i = 1; i < len; ++i) {
      const auto b = static_cast<unsigned char>(text_[pos_ + i]);
      if ((b & 0xc0) != 0x80) fail_at(at + i, "invalid UTF-8 continuation byte 0x", hex2(b));
      cp = (cp << 6) | (b & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      fail_at(at, "invalid UTF-8 sequence (overlong, surrogate or beyond U+10FFFF)");
    }
    out.append(text_.substr(pos_, len));
    pos_ += len;
  }

  static std::string hex2(unsigned char b) {
    char buf[4];
    std::snprintf(buf, sizeof buf, "%02x", b);
    return buf;
  }

  std::string parse_string() {
    const size_t start = pos_;
    expect('"');
    std::string out;
    while (true) {
      if (pos_ >= text_.size()) fail_at(start, "unterminated string");
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) fail_at(pos_, "control character 0x", hex2(c), " in a string (escape it)");
      if (c >= 0x80) {
        copy_utf8_sequence(out);
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      const size_t escape_at = pos_++;
      if (pos_ >= text_.size()) fail_at(start, "unterminated string");
      const char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': append_utf8(out, parse_unicode_escape(escape_at)); break;
        default: fail_at(escape_at, "invalid escape \\", describe_at(text_, pos_ - 1));
      }
    }
  }

  std::string_view text_;
  std::string_view source_;
  JsonLimits limits_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

JsonValue parse_json(std::string_view text, std::string_view source, const JsonLimits& limits) {
  return JsonParser(text, source, limits).parse();
}

}  // namespace ls
