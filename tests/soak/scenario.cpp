// lockstep-soak-run's command line (see tests/soak/scenario.h).
#include "soak/scenario.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "programs/common/cli.h"

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

// A name of kFaultNames (the flag's check has seen to it).
Kind parse_fault(std::string_view text) {
  for (const auto& [kind, name] : kFaultNames) {
    if (text == name) return kind;
  }
  return Kind::kThrowInForward;
}

}  // namespace

const char* fault_name(Kind kind) {
  for (const auto& [k, name] : kFaultNames) {
    if (k == kind) return name;
  }
  return "unknown";
}

std::variant<Scenario, int> parse_scenario(int argc, char** argv) {
  Scenario s;
  testing::Fault fault;
  std::string fault_text = "none";
  int64_t stall_ms = 0;
  std::vector<std::string> faults{"none"};
  for (const auto& [kind, name] : kFaultNames) faults.emplace_back(name);
  CLI::App app("One scenario of the fault soak (scripts/soak): a small training run with one "
               "injected fault, its outcome judged.",
               "lockstep-soak-run");
  app.footer("Exit: 0 when the run ended as it must, 1 when it did not, 2 on a usage error.");
  app.add_option("--devices", s.devices, "host devices")->capture_default_str()->check(cli::positive());
  app.add_option("--fault", fault_text, "the fault to inject")
      ->capture_default_str()->check(cli::one_of(faults, "fault"));
  app.add_option("--replica", fault.replica, "the replica the fault fires on (0..)")
      ->check(cli::non_negative());
  app.add_option("--step", fault.step, "the step it fires in (1..)")->check(cli::positive());
  app.add_option("--steps", s.steps, "steps to train")->capture_default_str()->check(cli::positive());
  app.add_option("--seed", s.seed, "parameters and batches")->capture_default_str();
  std::string shard_text = "none", recompute_text = "none";
  app.add_option("--shard", shard_text,
                 "none, optimizer (ZeRO-1), gradients (ZeRO-2) or parameters (ZeRO-3)")
      ->capture_default_str()
      ->check(cli::one_of({"none", "optimizer", "gradients", "parameters"}, "shard mode"));
  app.add_option("--recompute", recompute_text, "none or blocks (activation checkpointing)")
      ->capture_default_str()->check(cli::one_of({"none", "blocks"}, "recompute mode"));
  app.add_option_function<int64_t>(
         "--collective-timeout-ms",
         [&s](int64_t ms) { s.collective_timeout = std::chrono::milliseconds(ms); },
         "the watchdog's bound (default 400)")
      ->check(cli::positive());
  app.add_option("--stall-ms", stall_ms, "how long a stall lasts (default 3 x the collective timeout)")
      ->check(cli::positive());
  CLI::Option* dir =
      app.add_option("--checkpoint-dir", s.checkpoint_dir, "save a checkpoint every K steps");
  app.add_option("--checkpoint-every", s.checkpoint_every, "K")
      ->capture_default_str()->check(cli::positive())->needs(dir);
  app.add_flag("--resume", s.resume, "continue from the directory's latest checkpoint (a fresh "
               "start without one)")->needs(dir);
  app.add_option("--digest-out", s.digest_out, "write the final parameters' digest (plain runs)");
  if (const std::optional<int> exit_code = cli::parse(app, argc, argv)) return *exit_code;
  s.shard = cli::shard_mode_of(shard_text);
  s.recompute = recompute_text == "blocks" ? Recompute::kBlocks : Recompute::kNone;
  if (fault_text != "none") {
    fault.kind = parse_fault(fault_text);
    if (fault.replica >= s.devices) {
      return cli::usage_error(app, "--replica " + std::to_string(fault.replica) +
                                       " is not one of the " + std::to_string(s.devices) +
                                       " replicas");
    }
    if (fault.step > s.steps) {
      return cli::usage_error(app, "--step " + std::to_string(fault.step) + " is past --steps " +
                                       std::to_string(s.steps) + ": the fault would never fire");
    }
    fault.stall = std::chrono::milliseconds(stall_ms > 0 ? stall_ms : 3 * s.collective_timeout.count());
    s.fault = fault;
  }
  return s;
}

}  // namespace ls::soak
