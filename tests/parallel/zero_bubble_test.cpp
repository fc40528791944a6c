// The ZB-H1 schedule (ScheduleKind::kZBH1; issue 26) on host devices: training is bitwise 1F1B's
// (the same losses and parameters) for an MLP and a GPT with a tied head and dropout, at 2 and 4
// stages, fewer and more micro-batches than stages, with recomputed layers and with two pipelines;
// a step whose gradients are non-finite is undone on every stage (post-validation), AdamW's step
// count included; no stage holds more micro-batches than 1F1B's first; the stats report the
// zero-bubble theory; a stage that throws or stalls in a weight gradient is named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/nn/functional.h>
#include <lockstep/nn/module.h>

#include <lockstep/pipeline.h>
#include <lockstep/transformer_config.h>
#include "engine/core/host/host_device.h"
#include "engine/core/runtime.h"
#include "ops/elementwise.h"
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::hosts;

struct TrainRun {
  std::vector<float> losses;
  std::vector<bool> skipped;
  std::vector<DataParallel::NamedParameter> parameters;
};

using Batches = std::function<data::Batch(int step)>;

TrainRun train(int devices, const ModelFactory& model, const OptimizerFactory& optimizer,
               const Batches& batches, int steps, int stages, int micro_batches,
               ScheduleKind schedule, Recompute recompute = Recompute::kNone) {
  PipelineOptions options;
  options.stages = stages;
  options.micro_batches = micro_batches;
  options.schedule = schedule;
  options.recompute = recompute;
  Pipeline pipe(hosts(devices), model, optimizer, options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) {
    const StepResult r = pipe.step(batches(s));
    run.losses.push_back(r.loss);
    run.skipped.push_back(r.skipped);
  }
  run.parameters = pipe.named_parameters();
  return run;
}

void expect_bitwise(const TrainRun& reference, const TrainRun& run, const std::string& what) {
  EXPECT_EQ(run.losses, reference.losses) << what;
  EXPECT_EQ(run.skipped, reference.skipped) << what;
  ASSERT_EQ(run.parameters.size(), reference.parameters.size()) << what;
  for (size_t i = 0; i < run.parameters.size(); ++i) {
    EXPECT_EQ(run.parameters[i].values, reference.parameters[i].values)
        << what << ": " << run.parameters[i].name;
  }
}

const ModelFactory kMlp = mlp_factory({20, 32, 24, 16, 10});
data::Batch mlp_batch(int step) {
  return testing::random_batch(16, 20, static_cast<uint32_t>(300 + step));
}
OptimizerFactory adamw() { return make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f}); }

TEST(ZeroBubble, AnMlpTrainsBitwiseAsOneFOneB) {
  for (int p : {2, 4}) {
    for (int m : {1, 3, 4, 8}) {
      const std::string what = "p " + std::to_string(p) + " m " + std::to_string(m);
      const TrainRun reference = train(p, kMlp, adamw(), mlp_batch, 3, p, m, ScheduleKind::k1F1B);
      expect_bitwise(reference, train(p, kMlp, adamw(), mlp_batch, 3, p, m, ScheduleKind::kZBH1),
                     what);
    }
  }
}

TEST(ZeroBubble, AGptWithTiedHeadAndDropoutTrainsBitwiseAsOneFOneB) {
  nn::TransformerConfig c = testing::tiny_gpt_config();  // embeddings, h.0, h.1, head
  c.dropout = 0.1f;
  const ModelFactory gpt = transformer_factory(c);
  auto batches = [](int step) { return testing::lm_batch(8, 40 + static_cast<uint32_t>(step)); };
  for (int p : {2, 4}) {
    for (Recompute recompute : {Recompute::kNone, Recompute::kBlocks}) {
      const std::string what = "p " + std::to_string(p) + " recompute " + recompute_name(recompute);
      const TrainRun reference =
          train(p, gpt, adamw(), batches, 3, p, 4, ScheduleKind::k1F1B, recompute);
      expect_bitwise(reference,
                     train(p, gpt, adamw(), batches, 3, p, 4, ScheduleKind::kZBH1, recompute),
                     what);
    }
  }
  // Two pipelines of two stages: each stage all-reduces with its peer before the optimizer.
  expect_bitwise(train(4, gpt, adamw(), batches, 3, 2, 4, ScheduleKind::k1F1B),
                 train(4, gpt, adamw(), batches, 3, 2, 4, ScheduleKind::kZBH1), "2 x 2");
}

// Step 2's batch has a NaN feature: every stage's gradients are non-finite, each stage has
// already stepped (post-validation), and all must come back to where they were, AdamW's step
// count included (its bias correction would differ in every later step otherwise).
TEST(ZeroBubble, ASkippedStepIsUndoneOnEveryStage) {
  auto batches = [](int step) {
    data::Batch b = mlp_batch(step);
    if (step == 2) b.images[5] = std::numeric_limits<float>::quiet_NaN();
    return b;
  };
  const TrainRun reference = train(4, kMlp, adamw(), batches, 5, 4, 4, ScheduleKind::k1F1B);
  ASSERT_EQ(reference.skipped, (std::vector<bool>{false, false, true, false, false}));
  const TrainRun run = train(4, kMlp, adamw(), batches, 5, 4, 4, ScheduleKind::kZBH1);
  expect_bitwise(reference, run, "a NaN in step 2");
  for (const auto& p : run.parameters) {
    for (float v : p.values) ASSERT_TRUE(std::isfinite(v)) << p.name;
  }
}

// Activation memory: ZB-H1's stage s holds p - s micro-batches' whole activations, as 1F1B's,
// and up to s more that keep only what their weight gradient needs (each linear's input and
// output gradient): at most p micro-batches, as 1F1B's first stage. So with stages of equal
// layers ZB-H1's peak is 1F1B's; per stage, it is at most p / (p - s) times 1F1B's. Measured as
// each stage's allocator peak less its model state (parameters, gradients, AdamW's two moments:
// 16 bytes a parameter) and, under ZB-H1, post-validation's copy of the parameters and moments
// (12 bytes a parameter).
std::vector<int64_t> activation_peaks(ScheduleKind schedule, int stages, int micro_batches) {
  nn::TransformerConfig c = testing::tiny_gpt_config();
  c.layers = 6;
  c.hidden = 32;
  c.ffn = 128;
  c.pad_vocab_multiple = 1;  // no room for a padded head: the state counted is the parameters'
  PipelineOptions options;
  options.stages = stages;
  options.micro_batches = micro_batches;
  options.schedule = schedule;
  const std::vector<Device> devices = hosts(stages);
  Pipeline pipe(devices, transformer_factory(c), adamw(), options);
  for (const Device& d : devices) device_runtime(d).allocator().reset_peak();
  for (int step = 0; step < 2; ++step) pipe.step(testing::lm_batch(32, 90 + step));
  std::vector<int64_t> out;
  for (int s = 0; s < stages; ++s) {
    int64_t numel = 0;
    for (const auto& p : pipe.stage_parameters(0, s))
      numel += static_cast<int64_t>(p.values.size());
    const int64_t state = numel * (splits_backward(schedule) ? 28 : 16);
    out.push_back(
        device_runtime(devices[static_cast<size_t>(s)]).allocator().stats().peak_bytes_in_use -
        state);
  }
  return out;
}

TEST(ZeroBubble, AStageHoldsAtMostAsManyMicroBatchesAsOneFOneBsFirst) {
  constexpr int p = 4;
  const std::vector<int64_t> one_f_one_b = activation_peaks(ScheduleKind::k1F1B, p, 8);
  const std::vector<int64_t> zero_bubble = activation_peaks(ScheduleKind::kZBH1, p, 8);
  // Stage 0 runs 1F1B's order with each W right after its B (2%: W's own scratch, as a
  // layernorm's input gradient it recomputes and drops).
  EXPECT_LE(zero_bubble[0], one_f_one_b[0] * 102 / 100);
  for (int s = 1; s < p; ++s) {
    const size_t i = static_cast<size_t>(s);
    std::printf("stage %d activations: 1F1B %.1f KiB, ZB-H1 %.1f KiB\n", s,
                static_cast<double>(one_f_one_b[i]) / 1024,
                static_cast<double>(zero_bubble[i]) / 1024);
    EXPECT_LE(zero_bubble[i], one_f_one_b[i] * p / (p - s)) << "stage " << s;
    EXPECT_GT(zero_bubble[i], one_f_one_b[i]) << "stage " << s << " holds no W-waiting batch";
  }
}

TEST(ZeroBubble, StatsReportTheZeroBubbleTheory) {
  PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 4;
  options.schedule = ScheduleKind::kZBH1;
  Pipeline pipe(hosts(2), mlp_factory({20, 64, 64, 10}), adamw(), options);
  pipe.step(testing::random_batch(32, 20, 1));
  const PipelineStepStats stats = pipe.last_step_stats();
  EXPECT_DOUBLE_EQ(stats.theoretical_bubble, 1.0 / 13.0);  // (p - 1) / (3m + p - 1)
  ASSERT_EQ(stats.busy_ms.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    EXPECT_GT(stats.busy_ms[s], 0) << s;
    EXPECT_GE(stats.bubble[s], 0) << s;
    EXPECT_LT(stats.bubble[s], 1) << s;
  }
  EXPECT_EQ(pipe.skipped_steps(), 0);
}

// ---- failures in a weight gradient ---------------------------------------------------------

// A linear layer whose weight gradient (W) throws, makes its stream sleep, or turns NaN on its
// `at`-th run (0-based, one per micro-batch on the stage that holds it, over the steps); its
// input gradient (B) is plain.
class WeightGradientFault final : public nn::Module {
 public:
  enum class Fault { kThrow, kStall, kNaN };
  WeightGradientFault(Fault fault, int at)
      : fault_(fault),
        at_(at),
        weight_(register_parameter("weight", {16, 16}, Init::uniform(0.25f))) {}
  Var forward(Tape& tape, const Var& input) override {
    const Var w = tape.parameter(weight_);
    const Var y = nn::linear(tape, input, w, nullptr);
    // A pass-through node that also reads the weight: its closure runs in W with w's gradient.
    const Var out = tape.output(y->value, {&y, &w});
    Stream* stream = &tape.stream();
    tape.record(out, {y, w}, [this, y, w, stream](const Tensor& dy) {
      if (y->requires_grad) {
        if (Tape::begin_grad(*y)) {
          axpy(1.0f, dy, y->grad, *stream);
        } else {
          y->grad.copy_from(dy, *stream);
        }
      }
      if (!w->requires_grad || runs_++ != at_) return;
      if (fault_ == Fault::kNaN) {
        fill(w->grad, std::numeric_limits<float>::quiet_NaN(), *stream);
        return;
      }
      if (fault_ == Fault::kThrow) LS_THROW("injected fault in a weight gradient");
      host_enqueue(*stream, [] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); });
    });
    return out;
  }

 private:
  Fault fault_;
  int at_;
  int runs_ = 0;
  Parameter& weight_;
};

// Linear ReLU | Fault Linear: the fault lands on stage 1 of 2, whose order is F0 B0 F1 B1 W0 F2
// B2 W1 F3 B3 W2 W3: its W1 comes after three backwards.
ModelFactory faulty_mlp(WeightGradientFault::Fault fault, int at = 1) {
  return [fault, at]() -> std::unique_ptr<nn::Module> {
    auto model = std::make_unique<nn::Sequential>();
    model->add(std::make_unique<nn::Linear>(20, 16));
    model->add(std::make_unique<nn::ReLU>());
    model->add(std::make_unique<WeightGradientFault>(fault, at));
    model->add(std::make_unique<nn::Linear>(16, 10));
    return model;
  };
}

PipelineOptions zero_bubble(int stages, int micro_batches) {
  PipelineOptions o;
  o.stages = stages;
  o.micro_batches = micro_batches;
  o.schedule = ScheduleKind::kZBH1;
  return o;
}

// Only the last stage's gradients turn non-finite (its W of step 3's micro-batch 1): stage 0 has
// already stepped with finite gradients when the verdict comes, and must be undone too.
TEST(ZeroBubble, AStageWithFiniteGradientsIsUndoneWhenAnotherStageIsNot) {
  const ModelFactory model = faulty_mlp(WeightGradientFault::Fault::kNaN, 9);  // 4 per step
  auto batches = [](int step) { return testing::random_batch(16, 20, 500 + step); };
  for (int devices : {2, 4}) {  // one pipeline of 2 stages, and two
    const std::string what = std::to_string(devices / 2) + " pipeline(s)";
    const TrainRun reference =
        train(devices, model, adamw(), batches, 5, 2, 4, ScheduleKind::k1F1B);
    ASSERT_EQ(reference.skipped, (std::vector<bool>{false, false, true, false, false})) << what;
    expect_bitwise(reference, train(devices, model, adamw(), batches, 5, 2, 4, ScheduleKind::kZBH1),
                   what);
  }
}

TEST(ZeroBubble, AStageThatThrowsInAWeightGradientAbortsAllAndIsNamed) {
  Pipeline pipe(hosts(2), faulty_mlp(WeightGradientFault::Fault::kThrow), adamw(),
                zero_bubble(2, 4));
  const auto start = std::chrono::steady_clock::now();
  try {
    pipe.step(testing::random_batch(16, 20, 1));
    FAIL() << "the injected fault did not fail the step";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 1 on host:1 failed in step (step 1, weight gradient of "
                        "micro-batch 1)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("injected fault in a weight gradient"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  try {
    pipe.step(testing::random_batch(16, 20, 1));
    FAIL() << "a failed pipeline stepped again";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a stage failed earlier"), std::string::npos);
  }
}

TEST(ZeroBubble, AStallInAWeightGradientIsNamed) {
  PipelineOptions o = zero_bubble(2, 4);
  o.timeout = std::chrono::milliseconds(300);
  Pipeline pipe(hosts(2), faulty_mlp(WeightGradientFault::Fault::kStall), adamw(), o);
  const auto start = std::chrono::steady_clock::now();
  try {
    pipe.step(testing::random_batch(16, 20, 1));
    FAIL() << "the stall did not fail the step";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << what;
    EXPECT_NE(what.find("stage 1 on host:1 stalled in weight gradient of micro-batch 1"),
              std::string::npos)
        << what;
  }
  // The sleeping job itself cannot be interrupted (1.5 s); nothing waits longer than it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

}  // namespace
}  // namespace ls
