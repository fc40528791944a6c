// Parsing command-line values for lockstep's programs (lockstep-train, lockstep-scale, ...):
// numbers, positive numbers and comma-separated lists, each failure a UsageError whose message
// names the flag and the bad text (programs exit with 2 on it).
#pragma once

#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ls::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <typename T>
T parse_number(std::string_view flag, std::string_view text) {
  T value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) {
    throw UsageError(std::string(flag) + ": '" + std::string(text) + "' is not a valid number");
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) throw UsageError(std::string(flag) + " must be finite");
  }
  return value;
}

template <typename T>
T parse_positive(std::string_view flag, std::string_view text) {
  T value = parse_number<T>(flag, text);
  if (!(value > 0)) {
    throw UsageError(std::string(flag) + " must be positive, got " + std::string(text));
  }
  return value;
}

// "1024,1024" -> {1024, 1024}; every element positive.
template <typename T>
std::vector<T> parse_positive_list(std::string_view flag, std::string_view text) {
  std::vector<T> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    out.push_back(parse_positive<T>(flag, text.substr(start, comma - start)));
    start = comma + 1;
  }
  return out;
}

}  // namespace ls::cli
