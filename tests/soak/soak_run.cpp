// lockstep-soak-run: one scenario of the fault soak (tests/soak/soak.py draws them at random).
// It trains a 16-32-10 MLP on host devices (any shard and recompute mode) with seeded synthetic
// batches and one injected fault
// (tests/parallel/fault_injection.h), judges how the run ended and prints one line, PASS or FAIL
// with what was expected and what was seen; exit 0 on PASS, 1 on FAIL, 2 on a usage error.
// What must happen: an exception in forward/backward/optimizer arrives as one ls::Error naming
// the replica, step and phase; a skipped collective or a stall as a timeout carrying the
// watchdog's report; mismatched collectives as a desync; each within its bound, the object
// refusing further steps and destroyed without a blocked thread. A NaN batch skips the step on
// every replica and training goes on. A plain run (no fault) may checkpoint, resume, and write a
// digest of its final parameters: the driver kills it and compares the resumed run's digest.
// With --pipeline the run is a pipeline (tests/soak/pipeline_soak.cpp).
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "programs/common/cli.h"
#include <lockstep/data_parallel.h>
#include "parallel/fault_injection.h"
#include "parallel/random_batch.h"
#include "soak/pipeline_soak.h"
#include "soak/scenario.h"
#include "soak/verdict.h"

namespace ls::soak {
namespace {

using Kind = testing::Fault::Kind;

std::unique_ptr<DataParallel> make_run(const Scenario& s) {
  DataParallelOptions options;
  options.seed = s.seed;
  options.timeout = s.collective_timeout;
  options.shard = s.shard;
  options.recompute = s.recompute;
  // A run that hangs outside the watchdog's reach still shows where every replica is (the
  // driver attaches this output to the failure).
  options.heartbeat_interval = std::chrono::seconds(1);
  options.heartbeat = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  ModelFactory model = mlp_factory({16, 32, 10});
  OptimizerFactory optimizer = make_optimizer_factory({});
  EngineHooks hooks;
  if (s.fault) {
    options.graphs = !testing::needs_eager_steps(s.fault->kind);
    model = testing::with_fault(model, *s.fault);
    optimizer = testing::with_fault(optimizer, *s.fault);
    hooks = testing::with_fault(*s.fault);
  }
  return make_data_parallel(parse_devices("host:" + std::to_string(s.devices)), model, optimizer,
                            options, hooks);
}

// Step `step`'s global batch depends on the seed and the step only, so a resumed run sees
// exactly the batches of an uninterrupted one.
data::Batch batch_for(const Scenario& s, int64_t step) {
  return testing::random_batch(4 * s.devices, 16, s.seed * 1000003u + static_cast<uint32_t>(step));
}

// ---- faults that must end the run with an error --------------------------------------------

struct Expected {
  ErrorKind kind;
  std::vector<std::string> parts;  // the message must contain each
  double bound_s;                  // from the faulty step's start to the error
};

Expected expected_error(const Scenario& s) {
  const testing::Fault& f = *s.fault;
  const std::string r = std::to_string(f.replica);
  const std::string step = std::to_string(f.step);
  const double timeout_s = std::chrono::duration<double>(s.collective_timeout).count();
  char timeout_text[48];
  std::snprintf(timeout_text, sizeof timeout_text, "collective timeout (%.1f s)", timeout_s);
  const std::string never_issued = "replica " + r + " (host:" + r + ") never issued #";
  switch (f.kind) {
    case Kind::kThrowInForward:
    case Kind::kThrowInBackward:
    case Kind::kThrowInOptimizer: {
      const std::string phase = f.kind == Kind::kThrowInForward    ? "forward"
                                : f.kind == Kind::kThrowInBackward ? "backward"
                                                                   : "optimizer";
      return {
          ErrorKind::kUsage,
          {"replica " + r + " on host:" + r + " failed in step (step " + step + ", " + phase + ")",
           "injected fault: exception in " + phase},
          kPromptS};
    }
    case Kind::kSkipCollective: {
      // ZeRO-2's and ZeRO-3's non-finite count rides with the loss (Replica::step_body).
      const bool zero3 = s.shard == ShardMode::kParameters;
      const std::string loss = s.shard == ShardMode::kGradients || zero3
                                   ? "(loss and non-finite count, 8 B)"
                                   : "(loss, 4 B)";
      // The step's last collective (ZeRO-3 all-gathers nothing after the optimizer): the others
      // wait for it.
      if (s.shard == ShardMode::kNone || zero3) {
        return {ErrorKind::kTimeout, {timeout_text, loss, never_issued}, timeout_s + kMarginS};
      }
      // ZeRO: the replica goes on to the step's all-gather of updated parameters, which the
      // others' loss all-reduce meets at the same number: a desync, seen at once.
      return {ErrorKind::kDesync,
              {"collective desync at #", loss, "replica " + r + " issued all_gather #",
               "(updated parameters"},
              kPromptS};
    }
    case Kind::kStall: {
      // The stalled thread sleeps in user code, which no abort can cut short: the step returns
      // once it wakes, with the report the watchdog made at the timeout.
      const double stall_s = std::chrono::duration<double>(f.stall).count();
      return {ErrorKind::kTimeout,
              {timeout_text, never_issued, "it is in forward of step " + step},
              std::max(stall_s, timeout_s) + kMarginS};
    }
    case Kind::kWrongCount:
      return {ErrorKind::kDesync, {"collective desync at #", "bucket 0"}, kPromptS};
    case Kind::kNaN: break;
  }
  LS_THROW_AS(ErrorKind::kInternal, "fault ", fault_name(f.kind), " does not end in an error");
}

int run_error_fault(const Scenario& s) {
  const Expected want = expected_error(s);
  const int64_t fault_step = s.fault->step;
  Verdict verdict;
  std::string details = "no step failed";
  bool failed = false;
  std::unique_ptr<DataParallel> dp = make_run(s);
  for (int64_t step = 1; step <= s.steps; ++step) {
    const data::Batch batch = batch_for(s, step);
    const Clock::time_point start = Clock::now();
    try {
      dp->step(batch);
    } catch (const Error& e) {
      failed = true;
      const double took = seconds_since(start);
      const std::string message = e.what();
      char head[96];
      std::snprintf(head, sizeof head,
                    "ls::Error (%s) in step %lld after %.2f s: ", error_kind_name(e.kind()),
                    static_cast<long long>(step), took);
      details = head + message;
      verdict.expect(step == fault_step, "the error in step " + std::to_string(fault_step),
                     "it in step " + std::to_string(step));
      verdict.expect(e.kind() == want.kind, std::string("kind ") + error_kind_name(want.kind),
                     error_kind_name(e.kind()));
      for (const std::string& part : want.parts) {
        verdict.expect(message.find(part) != std::string::npos, "'" + part + "' in the message",
                       "it missing");
      }
      verdict.expect(took <= want.bound_s,
                     "the error within " + std::to_string(want.bound_s) + " s",
                     std::to_string(took) + " s");
      break;
    }
  }
  verdict.expect(failed, "an error in step " + std::to_string(fault_step), "no step failed");
  if (!failed) return verdict.report(describe(s), details);
  // A failed DataParallel refuses further steps and is destroyed without a blocked thread (the
  // driver's wall-clock limit catches a destructor that never returns).
  bool refused = false;
  try {
    dp->step(batch_for(s, 1));
  } catch (const Error&) {
    refused = true;
  }
  verdict.expect(refused, "further steps refused", "a step that ran");
  const Clock::time_point teardown = Clock::now();
  dp.reset();
  const double teardown_s = seconds_since(teardown);
  verdict.expect(teardown_s <= kPromptS, "destruction within " + std::to_string(kPromptS) + " s",
                 std::to_string(teardown_s) + " s");
  return verdict.report(describe(s), details);
}

// ---- a NaN batch: the step is skipped everywhere, training goes on -------------------------

int run_nan(const Scenario& s) {
  const int64_t nan_step = s.fault->step;
  Verdict verdict;
  std::unique_ptr<DataParallel> dp = make_run(s);
  for (int64_t step = 1; step <= s.steps; ++step) {
    std::vector<float> before;
    if (step == nan_step) before = dp->parameters(0);
    const StepResult result = dp->step(batch_for(s, step));
    verdict.expect(result.skipped == (step == nan_step),
                   "step " + std::to_string(step) + (step == nan_step ? " skipped" : " taken"),
                   result.skipped ? "it skipped" : "it taken");
    if (step != nan_step) continue;
    for (int r = 0; r < s.devices; ++r) {
      verdict.expect(dp->parameters(r) == before,
                     "replica " + std::to_string(r) + "'s parameters unchanged by the skipped step",
                     "them changed");
    }
  }
  verdict.expect(dp->skipped_steps() == 1, "1 skipped step", std::to_string(dp->skipped_steps()));
  verdict.expect(dp->steps_taken() == s.steps, std::to_string(s.steps) + " steps taken",
                 std::to_string(dp->steps_taken()));
  const std::vector<float> params = dp->parameters(0);
  for (int r = 1; r < s.devices; ++r) {
    verdict.expect(dp->parameters(r) == params, "replica " + std::to_string(r) + " equal to 0",
                   "them different");
  }
  return verdict.report(describe(s), "skipped " + std::to_string(dp->skipped_steps()) + " of " +
                                         std::to_string(dp->steps_taken()) + " steps");
}

// ---- a plain run: checkpoints, resume, digest ----------------------------------------------

// The run's final state: steps taken and a CRC-32 of replica 0's parameter bytes.
std::string digest(DataParallel& dp) {
  const std::vector<float> params = dp.parameters(0);
  const uLong crc = crc32(0L, reinterpret_cast<const Bytef*>(params.data()),
                          static_cast<uInt>(params.size() * sizeof(float)));
  char text[96];
  std::snprintf(text, sizeof text, "steps %lld params %zu crc32 %08lx",
                static_cast<long long>(dp.steps_taken()), params.size(), crc);
  return text;
}

int run_plain(const Scenario& s) {
  Verdict verdict;
  std::unique_ptr<DataParallel> dp = make_run(s);
  std::string resumed = "fresh start";
  if (s.resume && latest_checkpoint(s.checkpoint_dir)) {
    const TrainingPosition position = dp->load(s.checkpoint_dir);
    verdict.expect(
        position.batch_index == dp->steps_taken(),
        "the data position at the checkpoint's step " + std::to_string(dp->steps_taken()),
        "batch " + std::to_string(position.batch_index));
    resumed = "resumed at step " + std::to_string(dp->steps_taken());
  }
  for (int64_t step = dp->steps_taken() + 1; step <= s.steps; ++step) {
    const StepResult result = dp->step(batch_for(s, step));
    verdict.expect(!result.skipped, "step " + std::to_string(step) + " taken", "it skipped");
    if (!s.checkpoint_dir.empty() && step % s.checkpoint_every == 0) {
      dp->save(s.checkpoint_dir, {0, step});
    }
  }
  const std::vector<float> params = dp->parameters(0);
  for (int r = 1; r < s.devices; ++r) {
    verdict.expect(dp->parameters(r) == params, "replica " + std::to_string(r) + " equal to 0",
                   "them different");
  }
  const std::string state = digest(*dp);
  if (!s.digest_out.empty()) {
    std::ofstream out(s.digest_out, std::ios::trunc);
    out << state << "\n";
    verdict.expect(static_cast<bool>(out.flush()), "the digest written to " + s.digest_out,
                   "a write error");
  }
  return verdict.report(describe(s), resumed + ", " + state);
}

int run(const Scenario& s) {
  if (s.pipeline > 0) return run_pipeline(s);
  if (!s.fault) return run_plain(s);
  if (s.fault->kind == Kind::kNaN) return run_nan(s);
  return run_error_fault(s);
}

}  // namespace
}  // namespace ls::soak

int main(int argc, char** argv) {
  std::variant<ls::soak::Scenario, int> parsed = ls::soak::parse_scenario(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const ls::soak::Scenario& scenario = std::get<ls::soak::Scenario>(parsed);
  try {
    const int status = ls::soak::run(scenario);
    std::fflush(stdout);
    return status;
  } catch (const std::exception& e) {
    std::printf("FAIL %s: unexpected error: %s\n", ls::soak::describe(scenario).c_str(), e.what());
    return 1;
  }
}
