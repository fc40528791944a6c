// JsonWriter (see lockstep/json.h).
#include <lockstep/json.h>

#include <cmath>
#include <cstdio>
#include <fstream>

#include <lockstep/error.h>

namespace ls {

std::string json_escape(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

void JsonWriter::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_in_scope_.empty()) {
    if (!first_in_scope_.back()) out_ += ", ";
    first_in_scope_.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  out_ += "{";
  first_in_scope_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  LS_ASSERT(!first_in_scope_.empty());
  first_in_scope_.pop_back();
  out_ += "}";
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  out_ += "[";
  first_in_scope_.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  LS_ASSERT(!first_in_scope_.empty());
  first_in_scope_.pop_back();
  out_ += "]";
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view name) {
  before_value();
  out_ += json_escape(name) + ": ";
  after_key_ = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view text) {
  before_value();
  out_ += json_escape(text);
  return *this;
}

JsonWriter& JsonWriter::value(double number) {
  before_value();
  if (!std::isfinite(number)) {
    out_ += "null";
  } else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.9g", number);
    out_ += buf;
  }
  return *this;
}

JsonWriter& JsonWriter::value_fixed(double number, int decimals) {
  before_value();
  if (!std::isfinite(number)) {
    out_ += "null";
  } else {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, number);
    out_ += buf;
  }
  return *this;
}

JsonWriter& JsonWriter::value(int64_t number) {
  before_value();
  out_ += std::to_string(number);
  return *this;
}

JsonWriter& JsonWriter::value(bool flag) {
  before_value();
  out_ += flag ? "true" : "false";
  return *this;
}

void JsonWriter::write_file(const std::string& path) const {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream file(tmp, std::ios::binary | std::ios::trunc);
    LS_CHECK(file.good(), "cannot write '", tmp,
             "': check that the directory exists and is writable");
    file << out_ << "\n";
    file.close();
    LS_CHECK(file.good(), "writing '", tmp, "' failed (disk full?)");
  }
  LS_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path,
           "'");
}

}  // namespace ls
