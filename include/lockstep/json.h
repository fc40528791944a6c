// A minimal JSON writer for the reports lockstep writes (training results, scaling runs,
// checkpoint metadata). Builds one document in memory; strings are escaped per RFC 8259 and
// non-finite numbers become null (JSON has no NaN). Not a parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ls {

class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  JsonWriter& key(std::string_view name);
  JsonWriter& value(std::string_view text);
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(double number);
  JsonWriter& value(int64_t number);
  JsonWriter& value(int number) { return value(static_cast<int64_t>(number)); }
  JsonWriter& value(bool flag);
  // A number with exactly `decimals` digits after the point, however large (value(double) keeps
  // 9 significant digits: a trace's microsecond timestamps need more once a run is long).
  JsonWriter& value_fixed(double number, int decimals);
  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    return key(name).value(v);
  }
  const std::string& str() const { return out_; }

  // Writes the document to `path` (via a temporary file and rename, so a reader never sees half
  // a file); raises ls::Error naming the path on failure.
  void write_file(const std::string& path) const;

 private:
  void before_value();
  std::string out_;
  std::vector<bool> first_in_scope_;  // per open object/array: no element written yet
  bool after_key_ = false;
};

std::string json_escape(std::string_view text);

}  // namespace ls
