// The fault soak's pipeline scenarios (see tests/soak/pipeline_soak.h).
#include "soak/pipeline_soak.h"

#include <cmath>
#include <limits>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/module.h>
#include <lockstep/pipeline.h>
#include "ops/elementwise.h"
#include "parallel/random_batch.h"
#include "soak/verdict.h"

namespace ls::soak {
namespace {

using Kind = testing::Fault::Kind;

// y = x W^T + b, which injects `fault` the first time it runs in training in the fault's step:
// it throws or sleeps in forward, or records an identity whose backward throws or hands the layer
// a NaN gradient (the loss stays finite: the skip must come from the gradients). One instance per
// stage thread (each pipeline's stage builds its own), so `fired_` needs no lock.
class FaultyLinear final : public nn::Module {
 public:
  FaultyLinear(int64_t in, int64_t out, testing::Fault fault)
      : fault_(fault),
        weight_(register_parameter("weight", {out, in},
                                   Init::uniform(1.0f / std::sqrt(static_cast<float>(in))))),
        bias_(register_parameter("bias", {out}, Init::zeros())) {}

  Var forward(Tape& tape, const Var& x) override {
    const Var w = tape.parameter(weight_);
    const Var b = tape.parameter(bias_);
    Var y = nn::linear(tape, x, w, &b);
    // Training forwards only; with recompute a layer's first forward records nothing and its
    // replay in backward does: forward faults fire in the first, backward ones in the replay.
    const ForwardContext& context = tape.context();
    const bool in_forward = fault_.kind == Kind::kThrowInForward || fault_.kind == Kind::kStall;
    if (!context.training || fired_ || context.step + 1 != fault_.step) return y;
    if (!in_forward && !tape.recording()) return y;
    fired_ = true;
    switch (fault_.kind) {
      case Kind::kThrowInForward:
        LS_THROW_AS(ErrorKind::kUsage, "injected fault: exception in forward");
      case Kind::kStall:
        std::this_thread::sleep_for(fault_.stall);
        return y;
      case Kind::kNaN: {
        Var out = tape.output(y->value, {&y});
        Stream& stream = tape.stream();
        tape.record(out, {y}, [y, &stream](const Tensor& dy) {
          Tape::begin_grad(*y);  // an intermediate: its only contribution writes
          y->grad.copy_from(dy, stream);
          fill(y->grad, std::numeric_limits<float>::quiet_NaN(), stream);
        });
        return out;
      }
      case Kind::kThrowInBackward: {
        Var out = tape.output(y->value, {&y});
        tape.record(out, {y}, [](const Tensor&) {
          LS_THROW_AS(ErrorKind::kUsage, "injected fault: exception in backward");
        });
        return out;
      }
      default:
        return y;
    }
  }

 private:
  testing::Fault fault_;
  Parameter& weight_;
  Parameter& bias_;
  bool fired_ = false;
};

// 2P layers of widths 16 -> 32 -> ... -> 32 -> 10 with ReLU between; layer 2 x stage faulty.
ModelFactory faulty_mlp(int stages, const testing::Fault& fault) {
  return [stages, fault] {
    auto seq = std::make_unique<nn::Sequential>();
    const int layers = 2 * stages;
    for (int i = 0; i < layers; ++i) {
      const int64_t in = i == 0 ? 16 : 32, out = i + 1 == layers ? 10 : 32;
      if (i == 2 * fault.replica) {
        seq->add(std::make_unique<FaultyLinear>(in, out, fault));
      } else {
        seq->add(std::make_unique<nn::Linear>(in, out));
      }
      if (i + 1 < layers) seq->add(std::make_unique<nn::ReLU>());
    }
    return std::unique_ptr<nn::Module>(std::move(seq));
  };
}

std::unique_ptr<Pipeline> make_pipeline(const Scenario& s) {
  PipelineOptions options;
  options.stages = s.pipeline;
  options.micro_batches = 4;
  options.schedule = s.schedule;
  options.recompute = s.recompute;
  options.seed = s.seed;
  options.timeout = s.collective_timeout;
  options.heartbeat_interval = std::chrono::seconds(1);
  options.heartbeat = [](const std::string& line) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  };
  return std::make_unique<Pipeline>(parse_devices("host:" + std::to_string(s.devices)),
                                    faulty_mlp(s.pipeline, *s.fault), make_optimizer_factory({}),
                                    options);
}

data::Batch batch_for(const Scenario& s, int64_t step) {
  return testing::random_batch(4 * s.devices, 16, s.seed * 1000003u + static_cast<uint32_t>(step));
}

// Whether `message` names stage `stage` of some pipeline ("stage S on host:N", or with several
// pipelines "stage S of pipeline Q on host:N") followed by `after`.
bool names_stage(const std::string& message, int stage, const std::string& after) {
  std::string escaped;
  for (char c : after) {
    if (std::string("()[].*+?^$|\\{}").find(c) != std::string::npos) escaped += '\\';
    escaped += c;
  }
  const std::regex pattern("stage " + std::to_string(stage) +
                           " (of pipeline [0-9]+ )?on host:[0-9]+" + escaped);
  return std::regex_search(message, pattern);
}

std::vector<float> flat_parameters(Pipeline& pipe) {
  std::vector<float> flat;
  for (const NamedParameter& p : pipe.named_parameters()) {
    flat.insert(flat.end(), p.values.begin(), p.values.end());
  }
  return flat;
}

int run_nan(const Scenario& s) {
  Verdict verdict;
  std::unique_ptr<Pipeline> pipe = make_pipeline(s);
  for (int64_t step = 1; step <= s.steps; ++step) {
    const bool poisoned = step == s.fault->step;
    const std::vector<float> before = poisoned ? flat_parameters(*pipe) : std::vector<float>();
    const StepResult result = pipe->step(batch_for(s, step));
    verdict.expect(result.skipped == poisoned,
                   "step " + std::to_string(step) + (poisoned ? " skipped" : " taken"),
                   result.skipped ? "it skipped" : "it taken");
    if (poisoned) {
      verdict.expect(flat_parameters(*pipe) == before,
                     "every stage's parameters unchanged by the skipped step", "them changed");
    }
  }
  verdict.expect(pipe->skipped_steps() == 1, "1 skipped step",
                 std::to_string(pipe->skipped_steps()));
  verdict.expect(pipe->steps_taken() == s.steps, std::to_string(s.steps) + " steps taken",
                 std::to_string(pipe->steps_taken()));
  return verdict.report(describe(s), "skipped " + std::to_string(pipe->skipped_steps()) + " of " +
                                         std::to_string(pipe->steps_taken()) + " steps");
}

int run_error(const Scenario& s) {
  const testing::Fault& f = *s.fault;
  const std::string step = std::to_string(f.step);
  const double timeout_s = std::chrono::duration<double>(s.collective_timeout).count();
  const double stall_s = std::chrono::duration<double>(f.stall).count();
  ErrorKind kind = ErrorKind::kUsage;
  std::vector<std::string> parts;
  std::string stage_then;  // what the message says right after naming the faulty stage
  double bound_s = kPromptS;
  switch (f.kind) {
    case Kind::kThrowInForward:
      parts = {"injected fault: exception in forward"};
      stage_then = " failed in step (step " + step + ", forward";
      break;
    case Kind::kThrowInBackward:
      parts = {"injected fault: exception in backward"};
      stage_then = " failed in step (step " + step + ", backward";
      break;
    default:  // kStall: the sleep cannot be cut short; the step returns when it wakes
      kind = ErrorKind::kTimeout;
      parts = {"no stage made progress for",
               "(timeout " + std::to_string(s.collective_timeout.count()) + " ms)"};
      stage_then = ": host in forward";
      bound_s = std::max(stall_s, timeout_s) + kMarginS;
      break;
  }
  Verdict verdict;
  std::string details = "no step failed";
  bool failed = false;
  std::unique_ptr<Pipeline> pipe = make_pipeline(s);
  for (int64_t n = 1; n <= s.steps && !failed; ++n) {
    const Clock::time_point start = Clock::now();
    try {
      pipe->step(batch_for(s, n));
    } catch (const Error& e) {
      failed = true;
      const double took = seconds_since(start);
      const std::string message = e.what();
      details = std::string("ls::Error (") + error_kind_name(e.kind()) + ") in step " +
                std::to_string(n) + " after " + std::to_string(took) + " s: " + message;
      verdict.expect(n == f.step, "the error in step " + step, "it in step " + std::to_string(n));
      verdict.expect(e.kind() == kind, std::string("kind ") + error_kind_name(kind),
                     error_kind_name(e.kind()));
      for (const std::string& part : parts) {
        verdict.expect(message.find(part) != std::string::npos, "'" + part + "' in the message",
                       "it missing");
      }
      verdict.expect(names_stage(message, f.replica, stage_then),
                     "'stage " + std::to_string(f.replica) + " [of pipeline Q] on host:N" +
                         stage_then + "' in the message",
                     "it missing");
      verdict.expect(took <= bound_s, "the error within " + std::to_string(bound_s) + " s",
                     std::to_string(took) + " s");
    }
  }
  verdict.expect(failed, "an error in step " + step, "no step failed");
  if (!failed) return verdict.report(describe(s), details);
  bool refused = false;
  try {
    pipe->step(batch_for(s, 1));
  } catch (const Error&) {
    refused = true;
  }
  verdict.expect(refused, "further steps refused", "a step that ran");
  const Clock::time_point teardown = Clock::now();
  pipe.reset();
  const double teardown_s = seconds_since(teardown);
  verdict.expect(teardown_s <= kPromptS, "destruction within " + std::to_string(kPromptS) + " s",
                 std::to_string(teardown_s) + " s");
  return verdict.report(describe(s), details);
}

}  // namespace

int run_pipeline(const Scenario& s) {
  return s.fault->kind == Kind::kNaN ? run_nan(s) : run_error(s);
}

}  // namespace ls::soak
