#include "programs/common/cli.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace ls::cli {
namespace {

// The number `text` holds, whole; nothing when it is not one (or not finite).
std::optional<double> finite_number(const std::string& text) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  if (!std::isfinite(value)) return std::nullopt;
  return value;
}

std::string format_number(double value) {
  char buffer[32];
  const auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, value);
  return ec == std::errc() ? std::string(buffer, end) : std::to_string(value);
}

}  // namespace

CLI::Validator positive() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::optional<double> value = finite_number(text);
        if (!value) return "'" + text + "' is not a finite number";
        return *value > 0 ? "" : "must be positive, got " + text;
      },
      "> 0", "positive");
}

CLI::Validator non_negative() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const std::optional<double> value = finite_number(text);
        if (!value) return "'" + text + "' is not a finite number";
        return *value >= 0 ? "" : "must be >= 0, got " + text;
      },
      ">= 0", "non_negative");
}

CLI::Validator at_most(double high) {
  const std::string bound = format_number(high);
  return CLI::Validator(
      [high, bound](std::string& text) -> std::string {
        const std::optional<double> value = finite_number(text);
        if (!value) return "'" + text + "' is not a finite number";
        return *value <= high ? "" : "must be at most " + bound + ", got " + text;
      },
      "<= " + bound, "at_most");
}

CLI::Validator in_range(double low, double high) {
  const std::string range = "[" + format_number(low) + ", " + format_number(high) + ")";
  return CLI::Validator(
      [low, high, range](std::string& text) -> std::string {
        const std::optional<double> value = finite_number(text);
        if (!value) return "'" + text + "' is not a finite number";
        return *value >= low && *value < high ? "" : "must be in " + range + ", got " + text;
      },
      "in " + range, "in_range");
}

CLI::Validator one_of(std::vector<std::string> names, std::string what) {
  std::string listed;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) listed += i + 1 == names.size() ? " or " : ", ";
    listed += names[i];
  }
  std::string description;
  for (const std::string& name : names) description += (description.empty() ? "" : "|") + name;
  return CLI::Validator(
      [names = std::move(names), what = std::move(what), listed](std::string& text) -> std::string {
        for (const std::string& name : names)
          if (text == name) return "";
        return "unknown " + what + " '" + text + "'; use " + listed;
      },
      description, "one_of");
}

int usage_error(std::string_view program, std::string_view message) {
  std::fprintf(stderr, "%.*s: %.*s\nRun with --help for more information.\n",
               static_cast<int>(program.size()), program.data(), static_cast<int>(message.size()),
               message.data());
  return kUsageExit;
}

int usage_error(const CLI::App& app, std::string_view message) {
  return usage_error(app.get_name(), message);
}

std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return std::nullopt;
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage_error(app, e.what());
  } catch (const UsageError& e) {  // thrown by a flag's callback
    return usage_error(app, e.what());
  }
}

int exit_code_of(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  return error != nullptr && error->kind() == ErrorKind::kUsage ? kUsageExit : 1;
}

std::vector<Device> devices_of(std::string_view flag, std::string_view spec) {
  try {
    return parse_devices(spec);
  } catch (const Error& e) {
    throw UsageError(std::string(flag) + ": " + e.message());
  }
}

std::optional<std::vector<Device>> devices_or_usage_error(std::string_view program,
                                                          std::string_view spec) {
  try {
    return devices_of("--devices", spec);
  } catch (const UsageError& e) {
    usage_error(program, e.what());
    return std::nullopt;
  }
}

ShardMode shard_mode_of(std::string_view value) {
  for (ShardMode mode : {ShardMode::kNone, ShardMode::kOptimizer, ShardMode::kGradients,
                         ShardMode::kParameters}) {
    if (value == shard_mode_name(mode)) return mode;
  }
  throw UsageError("--shard: unknown mode '" + std::string(value) +
                   "'; use none, optimizer (ZeRO-1), gradients (ZeRO-2) or parameters (ZeRO-3)");
}

}  // namespace ls::cli
