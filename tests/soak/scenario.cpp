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

std::string describe(const Scenario& s) {
  std::string out = (s.fault ? fault_name(s.fault->kind) : "plain") + std::string(" on host:") +
                    std::to_string(s.devices);
  if (s.pipeline > 0) {
    out += ", pipeline " + std::to_string(s.pipeline) + " (" + schedule_name(s.schedule) + ")";
  }
  if (s.fault) {
    out += std::string(s.pipeline > 0 ? ", stage " : ", replica ") +
           std::to_string(s.fault->replica) + ", step " + std::to_string(s.fault->step);
  }
  if (s.shard != ShardMode::kNone) out += std::string(", shard ") + shard_mode_name(s.shard);
  if (s.recompute != Recompute::kNone) {
    out += std::string(", recompute ") + recompute_name(s.recompute);
  }
  return out + ", " + std::to_string(s.steps) + " steps, seed " + std::to_string(s.seed);
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
  std::string schedule_text = "1f1b";
  app.add_option("--pipeline", s.pipeline,
                 "a pipeline of P stages instead of data parallel (--replica names the stage; "
                 "faults throw-forward, throw-backward, stall and nan)")
      ->check(cli::positive());
  app.add_option("--schedule", schedule_text, "the pipeline's schedule: 1f1b, gpipe or zb-h1")
      ->capture_default_str()->check(cli::one_of({"1f1b", "gpipe", "zb-h1"}, "schedule"));
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
  s.schedule = parse_schedule(schedule_text);
  if (s.pipeline > 0) {
    const bool pipeline_fault =
        fault_text == "throw-forward" || fault_text == "throw-backward" || fault_text == "stall" ||
        fault_text == "nan";
    if (s.pipeline < 2 || s.devices % s.pipeline != 0) {
      return cli::usage_error(app, "--pipeline " + std::to_string(s.pipeline) +
                                       " needs at least 2 stages and a device count that is a "
                                       "multiple of it (--devices " +
                                       std::to_string(s.devices) + ")");
    }
    if (!pipeline_fault) {
      return cli::usage_error(app, "--pipeline takes the faults throw-forward, throw-backward, "
                                   "stall and nan, not '" + fault_text + "'");
    }
    if (s.shard != ShardMode::kNone || !s.checkpoint_dir.empty()) {
      return cli::usage_error(app, "--pipeline takes neither --shard nor --checkpoint-dir");
    }
    if (fault.replica >= s.pipeline) {
      return cli::usage_error(app, "--replica " + std::to_string(fault.replica) +
                                       " names a stage: it must be below --pipeline " +
                                       std::to_string(s.pipeline));
    }
  }
  if (fault_text != "none") {
    fault.kind = parse_fault(fault_text);
    if (s.pipeline == 0 && fault.replica >= s.devices) {
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
