// Command lines of lockstep's programs, on CLI11 (Debian libcli11-dev): the checks a flag's value
// gets where it is declared (programs/common/flags.h declares the shared flags once), and the one
// way every program turns a bad command line into exit code 2. A UsageError is a bad command line
// found after parsing (flags that do not combine, devices this machine lacks); CLI11's own parse
// errors and ls::Error of kind usage are treated alike.
#pragma once

#include <CLI/CLI.hpp>
#include <lockstep/lockstep.h>

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ls::cli {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The exit code of a usage error in every program.
inline constexpr int kUsageExit = 2;

// A finite number > 0 (integers and reals alike): "must be positive, got -3".
CLI::Validator positive();
// A finite number >= 0.
CLI::Validator non_negative();
// A finite number <= high.
CLI::Validator at_most(double high);
// A finite number in [low, high).
CLI::Validator in_range(double low, double high);
// One of `names`: "unknown optimizer 'adam'; use adamw or sgd".
CLI::Validator one_of(std::vector<std::string> names, std::string what);

// Parses argv into the values bound to `app`. Returns nothing when the program should go on;
// otherwise its exit code: 0 after printing --help, 2 after printing a usage error (with the
// program's name and a pointer to --help) to stderr.
std::optional<int> parse(CLI::App& app, int argc, char** argv);

// Prints "<program>: <message>" and the pointer to --help to stderr; returns 2.
int usage_error(std::string_view program, std::string_view message);
int usage_error(const CLI::App& app, std::string_view message);

// The exit code of a failure that reached main: 2 for an ls::Error of kind usage (bad input the
// command line led to: sizes that do not divide, a data path that is not there), 1 for others.
int exit_code_of(const std::exception& e);

// The devices of a --devices SPEC. A spec that is malformed or names devices this machine lacks
// (cuda on a machine without a usable GPU, cuda:3 with two GPUs) is a UsageError.
std::vector<Device> devices_of(std::string_view flag, std::string_view spec);

// The same, for main(): the devices, or nothing after printing the usage error to stderr as
// parse() does (the caller returns kUsageExit).
std::optional<std::vector<Device>> devices_or_usage_error(std::string_view program,
                                                          std::string_view spec);

// The ShardMode of --shard's value (checked by the flag's validator).
ShardMode shard_mode_of(std::string_view value);

}  // namespace ls::cli
