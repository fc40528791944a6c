// Parsing command lines for lockstep's programs (lockstep-train, lockstep-scale, ...): the argv
// walk (`--flag value`, `--flag=value`, value-less switches) and numbers, positive numbers and
// comma-separated lists, each failure a UsageError whose message names the flag and the bad
// text (programs exit with 2 on it).
#pragma once

#include <lockstep/lockstep.h>

#include <charconv>
#include <cmath>
#include <functional>
#include <map>
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

// The devices of a --devices SPEC. A spec that is malformed or names devices this machine
// lacks (cuda on a machine without a usable GPU, cuda:3 with two GPUs) is a usage error.
inline std::vector<Device> parse_devices_flag(std::string_view flag, std::string_view spec) {
  try {
    return parse_devices(spec);
  } catch (const Error& e) {
    throw UsageError(std::string(flag) + ": " + e.message());
  }
}

// --shard: "none", "optimizer" (ZeRO-1) or "gradients" (ZeRO-2), as ShardMode.
inline ShardMode parse_shard_mode(std::string_view flag, std::string_view value) {
  for (ShardMode mode : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients}) {
    if (value == shard_mode_name(mode)) return mode;
  }
  throw UsageError(std::string(flag) + ": unknown mode '" + std::string(value) +
                   "'; use none, optimizer (ZeRO-1) or gradients (ZeRO-2)");
}

inline Precision parse_precision_flag(std::string_view flag, std::string_view value) {
  if (const std::optional<Precision> p = parse_precision(value)) return *p;
  throw UsageError(std::string(flag) + ": unknown precision '" + std::string(value) +
                   "'; use f32, bf16 or f16");
}

using FlagSetter = std::function<void(std::string_view flag, std::string_view value)>;

// Walks argv[1..]: a name in `switches` (e.g. "--help") runs its action; any other argument must
// be a flag of `flags`, followed by its value (`--flag value` or `--flag=value`).
inline void parse_flags(int argc, char** argv, const std::map<std::string_view, FlagSetter>& flags,
                        const std::map<std::string_view, std::function<void()>>& switches) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (auto sw = switches.find(arg); sw != switches.end()) {
      sw->second();
      continue;
    }
    std::string_view flag = arg, value;
    bool inline_value = false;
    if (const size_t eq = arg.find('='); arg.starts_with("--") && eq != std::string_view::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    const auto it = flags.find(flag);
    if (it == flags.end()) throw UsageError("unknown option '" + std::string(arg) + "'");
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(std::string(flag) + " needs a value");
      value = argv[++i];
    }
    it->second(flag, value);
  }
}

}  // namespace ls::cli
