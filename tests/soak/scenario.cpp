// lockstep-soak-run's command line (see tests/soak/scenario.h).
#include "soak/scenario.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>
#include <utility>

#include "examples/cli_values.h"

namespace ls::soak {
namespace {

using Kind = testing::Fault::Kind;

constexpr std::pair<Kind, const char*> kFaultNames[] = {
    {Kind::kThrowInForward, "throw-forward"},
    {Kind::kThrowInBackward, "throw-backward"},
    {Kind::kThrowInOptimizer, "throw-optimizer"},
    {Kind::kSkipCollective, "skip-collective"},
    {Kind::kWrongCount, "wrong-count"},
    {Kind::kStall, "stall"},
    {Kind::kNaN, "nan"},
};

constexpr const char* kUsage = R"(lockstep-soak-run: one scenario of the fault soak (scripts/soak)
  --devices N                 host devices (default 2)
  --fault KIND                none (default), throw-forward, throw-backward, throw-optimizer,
                              skip-collective, wrong-count, stall, nan
  --replica R --step S        where the fault fires (replica 0.., step 1..)
  --steps TOTAL               steps to train (default 6)
  --seed X                    parameters and batches (default 1)
  --collective-timeout-ms T   the watchdog's bound (default 400)
  --stall-ms M                how long a stall lasts (default 3 x the collective timeout)
  --checkpoint-dir D          save a checkpoint every K steps (--checkpoint-every K, default 1)
  --resume                    continue from D's latest checkpoint (a fresh start without one)
  --digest-out FILE           write the final parameters' digest (plain runs)
Exit: 0 when the run ended as it must, 1 when it did not, 2 on a usage error.
)";

Kind parse_fault(std::string_view text) {
  for (const auto& [kind, name] : kFaultNames) {
    if (text == name) return kind;
  }
  throw cli::UsageError("--fault: unknown fault '" + std::string(text) + "'");
}

}  // namespace

const char* fault_name(Kind kind) {
  for (const auto& [k, name] : kFaultNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

Scenario parse_scenario(int argc, char** argv) {
  Scenario s;
  testing::Fault fault;
  bool faulty = false;
  std::optional<int64_t> stall_ms;
  const std::map<std::string_view, cli::FlagSetter> flags = {
      {"--devices", [&](auto f, auto v) { s.devices = cli::parse_positive<int>(f, v); }},
      {"--fault",
       [&](auto, auto v) {
         faulty = v != "none";
         if (faulty) fault.kind = parse_fault(v);
       }},
      {"--replica", [&](auto f, auto v) { fault.replica = cli::parse_number<int>(f, v); }},
      {"--step", [&](auto f, auto v) { fault.step = cli::parse_positive<int64_t>(f, v); }},
      {"--steps", [&](auto f, auto v) { s.steps = cli::parse_positive<int64_t>(f, v); }},
      {"--seed", [&](auto f, auto v) { s.seed = cli::parse_number<uint32_t>(f, v); }},
      {"--collective-timeout-ms",
       [&](auto f, auto v) {
         s.collective_timeout = std::chrono::milliseconds(cli::parse_positive<int64_t>(f, v));
       }},
      {"--stall-ms", [&](auto f, auto v) { stall_ms = cli::parse_positive<int64_t>(f, v); }},
      {"--checkpoint-dir", [&](auto, auto v) { s.checkpoint_dir = v; }},
      {"--checkpoint-every",
       [&](auto f, auto v) { s.checkpoint_every = cli::parse_positive<int64_t>(f, v); }},
      {"--digest-out", [&](auto, auto v) { s.digest_out = v; }},
  };
  const std::map<std::string_view, std::function<void()>> switches = {
      {"--resume", [&] { s.resume = true; }},
      {"--help",
       [] {
         std::fputs(kUsage, stdout);
         std::exit(0);
       }},
  };
  cli::parse_flags(argc, argv, flags, switches);
  if (faulty) {
    if (fault.replica < 0 || fault.replica >= s.devices) {
      throw cli::UsageError("--replica " + std::to_string(fault.replica) + " is not one of the " +
                            std::to_string(s.devices) + " replicas");
    }
    if (fault.step > s.steps) {
      throw cli::UsageError("--step " + std::to_string(fault.step) + " is past --steps " +
                            std::to_string(s.steps) + ": the fault would never fire");
    }
    fault.stall = std::chrono::milliseconds(stall_ms.value_or(3 * s.collective_timeout.count()));
    s.fault = fault;
  }
  if (s.resume && s.checkpoint_dir.empty()) {
    throw cli::UsageError("--resume needs --checkpoint-dir");
  }
  return s;
}

}  // namespace ls::soak
