// Pipeline-parallel training on host devices: an MLP and a small GPT (tied head) cut into 2 and
// 4 stages with 1, 4 and 8 micro-batches under every schedule train to what one device trains on
// the same global batch; pipelines x data parallelism too; a stage that throws or stalls ends
// the step quickly with one error naming it; bad sizes are errors naming the value.
// Summation order: micro-batches split each weight gradient's GEMM sum over rows into m partial
// sums, and a tied weight's gradient is (head part) + (embedding part) summed across stages, so
// results agree to a relative 1e-5, not bitwise (m = 1 with no tied weight is bitwise).
#include <lockstep/pipeline.h>

#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include <lockstep/nn/module.h>
#include <lockstep/transformer_config.h>
#include "ops/softmax_xent.h"
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using testing::random_batch;

using testing::hosts;
using testing::max_relative_difference;
OptimizerFactory sgd() { return testing::momentum_sgd(); }

struct TrainRun {
  std::vector<float> losses;
  std::vector<DataParallel::NamedParameter> parameters;
};

using Batches = std::function<data::Batch(int step)>;

TrainRun single_device(const ModelFactory& model, const Batches& batches, int steps) {
  DataParallel dp(hosts(1), model, sgd());
  TrainRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(dp.step(batches(s)).loss);
  run.parameters = dp.named_parameters(0);
  return run;
}

TrainRun pipelined(int devices, const ModelFactory& model, const Batches& batches, int steps,
                   PipelineOptions options) {
  Pipeline pipe(hosts(devices), model, sgd(), options);
  TrainRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(pipe.step(batches(s)).loss);
  run.parameters = pipe.named_parameters();
  return run;
}

void expect_same_training(const TrainRun& reference, const TrainRun& run, const std::string& what) {
  ASSERT_EQ(reference.losses.size(), run.losses.size());
  for (size_t s = 0; s < run.losses.size(); ++s) {
    EXPECT_NEAR(run.losses[s], reference.losses[s], 1e-5 * std::abs(reference.losses[s]))
        << what << " step " << s;
  }
  EXPECT_LT(max_relative_difference(reference.parameters, run.parameters), 1e-5) << what;
}

PipelineOptions options(int stages, int micro_batches, ScheduleKind schedule) {
  PipelineOptions o;
  o.stages = stages;
  o.micro_batches = micro_batches;
  o.schedule = schedule;
  return o;
}

// ---- the MLP ---------------------------------------------------------------------------------

const ModelFactory kMlp = mlp_factory({20, 32, 24, 16, 10});
data::Batch mlp_batch(int step) { return random_batch(16, 20, static_cast<uint32_t>(100 + step)); }

TEST(Pipeline, MlpMatchesOneDeviceForEveryStageCountMicroBatchesAndSchedule) {
  const TrainRun reference = single_device(kMlp, mlp_batch, 3);
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kZBH1}) {
    for (int p : {2, 4}) {
      for (int m : {1, 4, 8}) {
        const std::string what = std::string(schedule_name(schedule)) + " p " + std::to_string(p) +
                                 " m " + std::to_string(m);
        expect_same_training(reference, pipelined(p, kMlp, mlp_batch, 3, options(p, m, schedule)),
                             what);
      }
    }
  }
}

TEST(Pipeline, OneMicroBatchWithoutTiedWeightsIsBitwiseOneDevice) {
  const TrainRun reference = single_device(kMlp, mlp_batch, 3);
  const TrainRun run = pipelined(2, kMlp, mlp_batch, 3, options(2, 1, ScheduleKind::k1F1B));
  EXPECT_EQ(run.losses, reference.losses);
  for (size_t i = 0; i < run.parameters.size(); ++i) {
    EXPECT_EQ(run.parameters[i].values, reference.parameters[i].values) << run.parameters[i].name;
  }
}

TEST(Pipeline, StagesHoldConsecutiveLayers) {
  Pipeline pipe(hosts(2), kMlp, sgd(), options(2, 2, ScheduleKind::k1F1B));
  EXPECT_EQ(pipe.stage_layers(),
            (std::vector<std::vector<std::string>>{{"0", "1", "2", "3"}, {"4", "5", "6"}}));
  EXPECT_EQ(pipe.parameter_count(), 20 * 32 + 32 + 32 * 24 + 24 + 24 * 16 + 16 + 16 * 10 + 10);
}

// ---- a small GPT (tied head) -----------------------------------------------------------------

constexpr int64_t kSeq = 16, kVocab = 64;

ModelFactory tiny_gpt(int layers) {
  nn::TransformerConfig c = nn::gpt_config(layers, 2, 32, kSeq, kVocab);
  c.pad_id = 0;
  c.dropout = 0.1f;  // masks follow the global row (ForwardContext::first_row), so they match
  return transformer_factory(c);
}

data::Batch gpt_batch(int step) {
  std::mt19937 rng(static_cast<uint32_t>(7 + step));
  data::Batch b;
  b.size = 16;
  b.features = kSeq;
  b.label_width = kSeq;
  for (int64_t i = 0; i < b.size * kSeq; ++i) {
    b.tokens.push_back(1 + static_cast<int32_t>(rng() % (kVocab - 1)));
  }
  for (int64_t i = 0; i < b.size * kSeq; ++i) {
    const bool last = (i + 1) % kSeq == 0;
    b.labels.push_back(last ? kIgnoreLabel : b.tokens[static_cast<size_t>(i + 1)]);
  }
  return b;
}

TEST(Pipeline, GptWithTiedHeadMatchesOneDevice) {
  const ModelFactory gpt = tiny_gpt(2);  // embeddings, h.0, h.1, head: up to 4 stages
  const TrainRun reference = single_device(gpt, gpt_batch, 3);
  for (ScheduleKind schedule : {ScheduleKind::k1F1B, ScheduleKind::kGPipe, ScheduleKind::kZBH1}) {
    for (int p : {2, 4}) {
      for (int m : {1, 4}) {
        const std::string what = std::string(schedule_name(schedule)) + " p " + std::to_string(p) +
                                 " m " + std::to_string(m);
        expect_same_training(reference, pipelined(p, gpt, gpt_batch, 3, options(p, m, schedule)),
                             what);
      }
    }
  }
}

// A BERT-layout classifier: bidirectional blocks mask padding keys, the head pools, a pooler.
TEST(Pipeline, BertClassifierMatchesOneDevice) {
  nn::TransformerConfig c = nn::bert_config(2, 2, 32, kSeq, kVocab);
  c.pad_id = 0;
  c.classes = 3;
  const ModelFactory bert = transformer_factory(c);
  const Batches batches = [](int step) {
    std::mt19937 rng(static_cast<uint32_t>(11 + step));
    data::Batch b;
    b.size = 16;
    b.features = kSeq;
    for (int64_t r = 0; r < b.size; ++r) {
      const int64_t length = 2 + static_cast<int64_t>(rng() % (kSeq - 1));  // right padding
      for (int64_t t = 0; t < kSeq; ++t) {
        b.tokens.push_back(t < length ? 1 + static_cast<int32_t>(rng() % (kVocab - 1)) : 0);
      }
      b.labels.push_back(static_cast<int32_t>(rng() % 3));
    }
    return b;
  };
  const TrainRun reference = single_device(bert, batches, 3);
  for (int p : {2, 4}) {
    expect_same_training(reference, pipelined(p, bert, batches, 3, options(p, 4, {})),
                         "bert p " + std::to_string(p));
  }
}

TEST(Pipeline, GptExportsTheTiedWeightOnceInSingleDeviceOrder) {
  Pipeline pipe(hosts(2), tiny_gpt(2), sgd(), options(2, 2, ScheduleKind::k1F1B));
  DataParallel dp(hosts(1), tiny_gpt(2), sgd());
  const auto mine = pipe.named_parameters();
  const auto theirs = dp.named_parameters(0);
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].name, theirs[i].name);
    EXPECT_EQ(mine[i].values, theirs[i].values) << mine[i].name;  // same initial values
  }
  EXPECT_EQ(pipe.stage_layers()[1].back(), "head");
}

// ---- pipelines x data parallelism -------------------------------------------------------------

TEST(Pipeline, TwoPipelinesOfTwoStagesMatchOneDevice) {
  const TrainRun mlp_reference = single_device(kMlp, mlp_batch, 3);
  expect_same_training(mlp_reference,
                       pipelined(4, kMlp, mlp_batch, 3, options(2, 4, ScheduleKind::k1F1B)),
                       "mlp 2 x 2");
  const ModelFactory gpt = tiny_gpt(2);
  expect_same_training(single_device(gpt, gpt_batch, 2),
                       pipelined(4, gpt, gpt_batch, 2, options(2, 2, ScheduleKind::kGPipe)),
                       "gpt 2 x 2");
}

TEST(Pipeline, EveryCopyOfATiedWeightStaysBitwiseEqual) {
  // wte.weight is held by the first stage (embeddings) and the last (the head). AdamW turns any
  // last-bit difference between the copies' gradients into a visible one.
  const OptimizerFactory adamw = make_optimizer_factory({"adamw", 1e-2f, 0.0f, 0.01f});
  for (auto [devices, stages] : {std::pair{4, 4}, std::pair{4, 2}, std::pair{6, 3}}) {
    Pipeline pipe(hosts(devices), tiny_gpt(2), adamw, options(stages, 2, ScheduleKind::k1F1B));
    for (int s = 0; s < 3; ++s) pipe.step(gpt_batch(s));
    std::vector<float> first;
    int copies = 0;
    for (int r = 0; r < pipe.pipelines(); ++r) {
      for (int s = 0; s < stages; ++s) {
        for (const auto& p : pipe.stage_parameters(r, s)) {
          if (p.name != "wte.weight") continue;
          ++copies;
          if (first.empty()) first = p.values;
          EXPECT_EQ(p.values, first) << "pipeline " << r << " stage " << s << " of " << devices
                                     << " devices in " << stages << " stages";
        }
      }
    }
    EXPECT_EQ(copies, 2 * pipe.pipelines());
  }
}

// ---- the bubble ------------------------------------------------------------------------------

TEST(Pipeline, StepStatsReportBusyTimeAndBubble) {
  Pipeline pipe(hosts(2), mlp_factory({20, 256, 256, 10}), sgd(),
                options(2, 4, ScheduleKind::k1F1B));
  pipe.step(random_batch(64, 20, 1));
  const PipelineStepStats stats = pipe.last_step_stats();
  ASSERT_EQ(stats.busy_ms.size(), 2u);
  ASSERT_EQ(stats.bubble.size(), 2u);
  EXPECT_GT(stats.step_ms, 0);
  for (int s = 0; s < 2; ++s) {
    EXPECT_GT(stats.busy_ms[static_cast<size_t>(s)], 0) << s;
    EXPECT_LE(stats.busy_ms[static_cast<size_t>(s)], stats.step_ms) << s;
    EXPECT_GE(stats.bubble[static_cast<size_t>(s)], 0);
    EXPECT_LT(stats.bubble[static_cast<size_t>(s)], 1);
  }
  EXPECT_DOUBLE_EQ(stats.theoretical_bubble, 1.0 / 5.0);
  // The same figures through Trainer, as lockstep-train reads them (data parallelism has none).
  const Trainer& trainer = pipe;
  ASSERT_TRUE(trainer.step_stats().bubble.has_value());
  EXPECT_EQ(*trainer.step_stats().bubble, stats.mean_bubble);
  EXPECT_EQ(trainer.step_stats().theoretical_bubble, stats.theoretical_bubble);
  DataParallel dp(hosts(2), mlp_factory({20, 8, 10}), sgd());
  dp.step(random_batch(8, 20, 1));
  EXPECT_FALSE(static_cast<const Trainer&>(dp).step_stats().bubble.has_value());
}

// ---- bad input -------------------------------------------------------------------------------

void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    FAIL() << "no error; expected one with: " << part;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Pipeline, BadSizesAreErrorsNamingTheValue) {
  expect_error(
      [] {
        Pipeline(hosts(4), mlp_factory({20, 16, 10}), sgd(), options(4, 2, {}));
      },
      "a pipeline of 4 stages needs at least 4 layers with parameters");
  expect_error([] { Pipeline(hosts(3), kMlp, sgd(), options(2, 2, {})); },
               "the device count must be a multiple of the stages");
  expect_error([] { Pipeline(hosts(2), kMlp, sgd(), options(2, 0, {})); },
               "micro-batches must be at least 1, got 0");
  Pipeline pipe(hosts(2), kMlp, sgd(), options(2, 8, {}));
  expect_error([&] { pipe.step(random_batch(6, 20, 1)); },
               "micro-batches 8 exceed the 6 rows each pipeline gets");
  pipe.step(random_batch(8, 20, 1));  // still usable: checked before any stage works
  Pipeline two(hosts(4), kMlp, sgd(), options(2, 1, {}));
  expect_error([&] { two.step(random_batch(7, 20, 1)); }, "does not divide by the 2 pipelines");
}

// ---- failures and stalls ---------------------------------------------------------------------

// A test-only layer: passes its input through, and on its `at`-th forward call (0-based, one
// call per micro-batch on the stage that holds it) throws or makes its stream sleep.
class FaultLayer final : public nn::Module {
 public:
  enum class Fault { kThrow, kStall };
  FaultLayer(Fault fault, int at) : fault_(fault), at_(at) {}
  Var forward(Tape& tape, const Var& input) override {
    if (calls_++ != at_) return input;
    if (fault_ == Fault::kThrow) LS_THROW("injected fault in the test layer");
    host_enqueue(tape.stream(),
                 [] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); });
    return input;
  }

 private:
  Fault fault_;
  int at_;
  int calls_ = 0;
};

// Linear ReLU | Linear Fault Linear: the fault layer lands on stage 1 of 2.
ModelFactory faulty_mlp(FaultLayer::Fault fault) {
  return [fault]() -> std::unique_ptr<nn::Module> {
    auto model = std::make_unique<nn::Sequential>();
    model->add(std::make_unique<nn::Linear>(20, 16));
    model->add(std::make_unique<nn::ReLU>());
    model->add(std::make_unique<nn::Linear>(16, 16));
    model->add(std::make_unique<FaultLayer>(fault, 2));
    model->add(std::make_unique<nn::Linear>(16, 10));
    return model;
  };
}

TEST(Pipeline, AStageThatThrowsAbortsAllAndIsNamed) {
  Pipeline pipe(hosts(2), faulty_mlp(FaultLayer::Fault::kThrow), sgd(),
                options(2, 4, ScheduleKind::k1F1B));
  const auto start = std::chrono::steady_clock::now();
  try {
    pipe.step(random_batch(16, 20, 1));
    FAIL() << "the injected fault did not fail the step";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("stage 1 on host:1 failed in step (step 1, forward of micro-batch 2)"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("injected fault in the test layer"), std::string::npos) << what;
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  expect_error([&] { pipe.step(random_batch(16, 20, 1)); }, "a stage failed earlier");
}

TEST(Pipeline, AStalledStageIsAbortedAfterTheTimeoutAndNamed) {
  PipelineOptions o = options(2, 4, ScheduleKind::k1F1B);
  o.timeout = std::chrono::milliseconds(300);
  Pipeline pipe(hosts(2), faulty_mlp(FaultLayer::Fault::kStall), sgd(), o);
  const auto start = std::chrono::steady_clock::now();
  try {
    pipe.step(random_batch(16, 20, 1));
    FAIL() << "the stall did not fail the step";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << what;
    EXPECT_NE(what.find("stage 1 on host:1 stalled in forward of micro-batch 2"), std::string::npos)
        << what;
    EXPECT_NE(what.find("timeout 300 ms"), std::string::npos) << what;
  }
  // The sleeping job itself cannot be interrupted (1.5 s); nothing waits longer than it.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

// The runtime DataParallel runs on gives a pipeline the same heartbeat and telemetry.
TEST(Pipeline, AStallIsSeenByTheHeartbeatAndItsReportHasTheTelemetry) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("lockstep-pipeline-" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  std::filesystem::remove(path);
  PipelineOptions o = options(2, 4, ScheduleKind::k1F1B);
  o.timeout = std::chrono::milliseconds(400);
  o.heartbeat_interval = std::chrono::milliseconds(50);
  std::vector<std::string> beats;
  o.heartbeat = [&](const std::string& line) { beats.push_back(line); };
  o.telemetry_path = path;
  o.telemetry_interval = std::chrono::milliseconds(50);
  std::string message;
  {
    Pipeline pipe(hosts(2), faulty_mlp(FaultLayer::Fault::kStall), sgd(), o);
    try {
      pipe.step(random_batch(16, 20, 1));
      FAIL() << "the stall did not fail the step";
    } catch (const Error& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(beats.empty());
  EXPECT_NE(beats.back().find("heartbeat: step 1: stage 0 on host:0: host in "),
            std::string::npos)
      << beats.back();
  // On host devices the stall is in the stream's work: the host threads wait in synchronize.
  EXPECT_NE(beats.back().find("; stage 1 on host:1: host in synchronize, device ran "),
            std::string::npos)
      << beats.back();
  EXPECT_NE(message.find("telemetry in " + path + "; last samples: host:0 at "), std::string::npos)
      << message;
  std::ifstream in(path);
  std::string first;
  ASSERT_TRUE(std::getline(in, first)) << path;
  EXPECT_NE(first.find("\"event\": \"start\""), std::string::npos) << first;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ls
