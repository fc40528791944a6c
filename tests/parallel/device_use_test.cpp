// How each device spent the steps, and the verdict (lockstep/device_use.h): the rules on
// hand-made numbers, the meter on hand-made marks, and real runs on two host devices made slow
// on purpose in one place each (a replica's forward, a replica's input, the caller between
// steps), whose verdicts must name that device and that cause; a balanced run's must not.
#include <lockstep/device_use.h>

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/core/json_reader.h"
#include <lockstep/data_parallel.h>
#include <lockstep/nn/module.h>
#include <lockstep/pipeline.h>
#include "parallel/data_parallel/engine_hooks.h"
#include "parallel/observability/device_use_meter.h"
#include "parallel/random_batch.h"

namespace ls {
namespace {

using Finding = UseVerdict::Finding;

Device host(int index) { return Device{DeviceKind::kHost, index}; }

DeviceUse use(int replica, double input, double compute, double wait, double idle,
              int64_t steps = 10) {
  DeviceUse u;
  u.device = host(replica);
  u.replica = replica;
  u.steps = steps;
  u.input_ms = input;
  u.compute_ms = compute;
  u.comm_wait_ms = wait;
  u.idle_ms = idle;
  u.window_ms = input + compute + wait + idle;
  return u;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---- the rules ---------------------------------------------------------------------------------

TEST(DeviceUseVerdict, BalancedDevicesAreAllUsed) {
  const UseVerdict v = judge_device_use({use(0, 1, 90, 5, 4), use(1, 1, 89, 6, 4)});
  EXPECT_EQ(v.finding, Finding::kAllUsed);
  EXPECT_DOUBLE_EQ(v.exposed_comm_share, 0.05);
  EXPECT_EQ(v.sentence,
            "all 2 devices are busy 90% / 89% of each step computing, communication 5% exposed: "
            "both are used");
}

TEST(DeviceUseVerdict, OneDeviceIsUsed) {
  const UseVerdict v = judge_device_use({use(0, 1, 97, 0, 2)});
  EXPECT_EQ(v.finding, Finding::kAllUsed);
  EXPECT_EQ(v.slowest, -1);
  EXPECT_EQ(v.sentence, "the device is busy 97% of each step computing: it is used");
}

TEST(DeviceUseVerdict, IdleBetweenStepsBlamesTheInputPipeline) {
  const UseVerdict v = judge_device_use({use(0, 1, 60, 4, 35), use(1, 1, 61, 3, 35)});
  EXPECT_EQ(v.finding, Finding::kInputBound);
  EXPECT_EQ(v.named, (std::vector<int>{0, 1}));
  EXPECT_TRUE(contains(v.sentence, "all 2 devices idle 35% / 35% of each step between steps"))
      << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "prefetch")) << v.sentence;
}

TEST(DeviceUseVerdict, OneDevicesSlowInputNamesItAlone) {
  // host:1 receives its input for 30% of each step; host:0 waits for it at the all-reduce.
  const UseVerdict v = judge_device_use({use(0, 1, 60, 38, 1), use(1, 30, 61, 8, 1)});
  EXPECT_EQ(v.finding, Finding::kInputBound);
  EXPECT_EQ(v.named, (std::vector<int>{1}));
  EXPECT_TRUE(contains(v.sentence, "device host:1 spends 30% of each step receiving"))
      << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "while the others wait for it")) << v.sentence;
}

TEST(DeviceUseVerdict, WaitingForASlowerDeviceNamesBoth) {
  // host:0 computes 40 ms and waits 45 ms for host:1, which computes 85 ms.
  const UseVerdict v = judge_device_use({use(0, 1, 40, 50, 0), use(1, 1, 85, 5, 0)});
  EXPECT_EQ(v.finding, Finding::kUnbalanced);
  EXPECT_EQ(v.slowest, 1);
  EXPECT_EQ(v.named, (std::vector<int>{1, 0}));
  EXPECT_NEAR(v.exposed_comm_share, 5.0 / 91.0, 1e-12);
  EXPECT_TRUE(contains(v.sentence, "device host:0 waits 49% of each step for host:1, the slowest"))
      << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "(compute 8.60 ms per step against 4.10 ms)")) << v.sentence;
}

// Devices gathered from several processes (Trainer::device_use_all_processes) are named with
// their process: each process has its own host:0.
TEST(DeviceUseVerdict, DevicesOfSeveralProcessesAreNamedWithTheirProcess) {
  DeviceUse fast = use(0, 1, 40, 50, 0), slow = use(1, 1, 85, 5, 0);
  slow.device = host(0);
  fast.process = 0;
  slow.process = 1;
  const UseVerdict v = judge_device_use({fast, slow});
  EXPECT_TRUE(contains(v.sentence,
                       "device host:0 (process 0) waits 49% of each step for host:0 (process 1), "
                       "the slowest"))
      << v.sentence;
  const std::vector<std::string> lines = use_verdict_lines(v);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].rfind("  host:0 (process 1)   compute  93.4%", 0), 0u) << lines[1];
  EXPECT_TRUE(contains(use_verdict_json(v), "\"replica\": 1, \"process\": 1, "))
      << use_verdict_json(v);
}

TEST(DeviceUseVerdict, CommunicationEveryDeviceWaitsForIsExposed) {
  const UseVerdict v = judge_device_use({use(0, 1, 60, 30, 1), use(1, 1, 61, 29, 1)});
  EXPECT_EQ(v.finding, Finding::kCommunicationBound);
  EXPECT_TRUE(contains(v.sentence, "communication is exposed 32% of each step")) << v.sentence;
}

TEST(DeviceUseVerdict, NothingMeasuredIsSaid) {
  EXPECT_EQ(judge_device_use({}).finding, Finding::kNotMeasured);
  const UseVerdict v = judge_device_use({use(0, 0, 0, 0, 0, 0), use(1, 1, 9, 0, 0)});
  EXPECT_EQ(v.finding, Finding::kNotMeasured);
  EXPECT_TRUE(contains(v.sentence, "no step was measured")) << v.sentence;
}

TEST(DeviceUseVerdict, JsonAndLinesCarryEveryPart) {
  const UseVerdict v = judge_device_use({use(0, 1, 40, 50, 0), use(1, 1, 85, 5, 0)});
  const JsonValue json = parse_json(use_verdict_json(v), "verdict");
  EXPECT_EQ(json.find("finding")->as_string(), "unbalanced");
  EXPECT_EQ(json.find("slowest")->as_string(), "host:1");
  EXPECT_EQ(json.find("sentence")->as_string(), v.sentence);
  const auto& devices = json.find("devices")->items();
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[1].find("device")->as_string(), "host:1");
  EXPECT_DOUBLE_EQ(devices[1].find("compute_ms")->as_double(), 85.0);
  EXPECT_DOUBLE_EQ(devices[0].find("comm_wait_ms")->as_double(), 50.0);
  EXPECT_EQ(devices[0].find("steps")->as_int64(), 10);
  const std::vector<std::string> lines = use_verdict_lines(v);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(contains(lines[0], "host:0") && contains(lines[0], "comm wait  54.9%")) << lines[0];
  EXPECT_EQ(lines[2], "verdict: " + v.sentence);
}

// ---- the meter ---------------------------------------------------------------------------------

// A step's marks: input, forward+backward, comm wait and tail lengths (ns) from `begin`.
StepMarks marks_at(int64_t begin, int64_t input, int64_t backward, int64_t wait, int64_t tail) {
  StepMarks m;
  m.ns[kStepBegin] = begin;
  m.ns[kInputReady] = begin + input;
  m.ns[kBackwardEnd] = m.ns[kInputReady] + backward;
  m.ns[kGradientsReduced] = m.ns[kBackwardEnd] + wait;
  m.ns[kStepEnd] = m.ns[kGradientsReduced] + tail;
  return m;
}

TEST(DeviceUseMeter, SumsEachDevicesOwnMarksPastTheWarmup) {
  // Two devices on unrelated clocks; steps of 10 ms (1 input, 6 compute, 2 wait, 1 tail) on
  // host:0, 1 ms apart; host:1 has no wait and 3 ms gaps.
  DeviceUseMeter meter({host(0), host(1)}, /*first_replica=*/4,
                       /*unmeasured_steps=*/2);
  const int64_t ms = 1'000'000;
  for (int64_t step = 1; step <= 5; ++step) {
    if (step == 4) meter.interrupt();  // an evaluation before step 4: its gap is not idle
    meter.add(step, {marks_at(step * 11 * ms, 1 * ms, 6 * ms, 2 * ms, 1 * ms),
                     marks_at(500 * ms + step * 13 * ms, 2 * ms, 7 * ms, 0, 1 * ms)});
  }
  const std::vector<DeviceUse> d = meter.devices();
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[1].replica, 5);
  EXPECT_EQ(d[0].steps, 3);  // steps 3, 4, 5
  EXPECT_DOUBLE_EQ(d[0].input_ms, 3.0);
  EXPECT_DOUBLE_EQ(d[0].compute_ms, 21.0);
  EXPECT_DOUBLE_EQ(d[0].comm_wait_ms, 6.0);
  EXPECT_DOUBLE_EQ(d[0].idle_ms, 2.0);  // before steps 3 and 5, not 4
  EXPECT_DOUBLE_EQ(d[0].window_ms, 32.0);
  EXPECT_DOUBLE_EQ(d[1].idle_ms, 6.0);
  EXPECT_DOUBLE_EQ(d[1].compute_ms, 24.0);
  EXPECT_DOUBLE_EQ(d[1].comm_wait_ms, 0.0);
}

TEST(DeviceUseMeter, ShortRunsAreMeasuredAfterTheFirstStep) {
  DeviceUseMeter meter({host(0)}, 0, /*unmeasured_steps=*/3);
  const int64_t ms = 1'000'000;
  meter.add(1, {marks_at(0, 50 * ms, 50 * ms, 0, 0)});  // the first step: never measured
  EXPECT_EQ(meter.devices()[0].steps, 0);
  meter.add(2, {marks_at(101 * ms, 1 * ms, 8 * ms, 0, 1 * ms)});
  const DeviceUse d = meter.devices()[0];
  EXPECT_EQ(d.steps, 1);
  EXPECT_DOUBLE_EQ(d.compute_ms, 9.0);
  EXPECT_DOUBLE_EQ(d.idle_ms, 1.0);
  EXPECT_EQ(meter.verdict().finding, Finding::kAllUsed);
}

// ---- real runs on two host devices -------------------------------------------------------------

// A model whose forward sleeps on one replica (or on every one): a device slowed by its own step.
constexpr int kEveryReplica = -2;
class SleepyModule final : public nn::Module {
 public:
  SleepyModule(std::unique_ptr<nn::Module> inner, int slow_replica, std::chrono::milliseconds nap)
      : inner_(register_module("inner", std::move(inner))), slow_(slow_replica), nap_(nap) {}
  Var forward(Tape& tape, const Var& input) override {
    if (slow_ == kEveryReplica || current_replica() == slow_) std::this_thread::sleep_for(nap_);
    return inner_.forward(tape, input);
  }

 private:
  nn::Module& inner_;
  int slow_;
  std::chrono::milliseconds nap_;
};

constexpr int kSteps = 10;
constexpr int64_t kFeatures = 256;

struct Slowdown {
  int slow_forward = -1;     // this replica's forward sleeps (kEveryReplica: every one's)
  int slow_input = -1;       // this replica's input path sleeps
  bool slow_caller = false;  // the caller sleeps between steps
  std::vector<int64_t> widths = {kFeatures, 1024, 1024, 10};  // the MLP's
};

UseVerdict run_with(const Slowdown& slow) {
  const auto nap = std::chrono::milliseconds(40);
  ModelFactory mlp = mlp_factory(slow.widths);
  ModelFactory model = mlp;
  if (slow.slow_forward != -1) {
    model = [mlp, slow, nap] {
      return std::make_unique<SleepyModule>(mlp(), slow.slow_forward, nap);
    };
  }
  EngineHooks hooks;
  if (slow.slow_input >= 0) {
    hooks.before_upload = [slow, nap](int rank) {
      if (rank == slow.slow_input) std::this_thread::sleep_for(nap);
    };
  }
  DataParallelOptions options;
  options.graphs = slow.slow_forward == -1;  // a sleep in forward runs in eager steps only
  auto dp = make_data_parallel({host(0), host(1)}, model, make_optimizer_factory({"sgd", 0.01f}),
                               options, hooks);
  const data::Batch batch = testing::random_batch(128, kFeatures, 3);
  for (int i = 0; i < kSteps; ++i) {
    dp->step(batch);
    if (slow.slow_caller) std::this_thread::sleep_for(nap);
  }
  return dp->device_use();
}

void expect_consistent(const UseVerdict& v) {
  ASSERT_EQ(v.devices.size(), 2u);
  for (const DeviceUse& d : v.devices) {
    EXPECT_EQ(d.steps, kSteps - 3);  // the warm-up's three are not measured
    EXPECT_GT(d.compute_ms, 0.0);
    EXPECT_NEAR(d.input_ms + d.compute_ms + d.comm_wait_ms + d.idle_ms, d.window_ms, 1e-9);
  }
}

TEST(DeviceUseRun, ASleepInOneReplicasForwardNamesThatDeviceAsTheSlowest) {
  const UseVerdict v = run_with({.slow_forward = 1});
  expect_consistent(v);
  EXPECT_EQ(v.finding, Finding::kUnbalanced) << v.sentence;
  EXPECT_EQ(v.slowest, 1) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "host:0 waits")) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "for host:1, the slowest")) << v.sentence;
  // host:0 waits for at least most of the 40 ms nap of each step.
  EXPECT_GT(v.devices[0].comm_wait_ms / static_cast<double>(v.devices[0].steps), 30.0);
}

TEST(DeviceUseRun, AStalledInputOnOneReplicaNamesThatDeviceAndItsInput) {
  const UseVerdict v = run_with({.slow_input = 1});
  expect_consistent(v);
  EXPECT_EQ(v.finding, Finding::kInputBound) << v.sentence;
  EXPECT_EQ(v.named, (std::vector<int>{1})) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "device host:1 spends")) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "input")) << v.sentence;
  EXPECT_GT(v.devices[1].input_ms / static_cast<double>(v.devices[1].steps), 30.0);
}

TEST(DeviceUseRun, ASlowCallerLeavesEveryDeviceIdleBetweenSteps) {
  const UseVerdict v = run_with({.slow_caller = true});
  expect_consistent(v);
  EXPECT_EQ(v.finding, Finding::kInputBound) << v.sentence;
  EXPECT_EQ(v.named, (std::vector<int>{0, 1})) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "all 2 devices idle")) << v.sentence;
  EXPECT_GT(v.devices[0].idle_ms / static_cast<double>(v.devices[0].steps), 30.0);
}

// Both replicas nap alike in forward: a balanced run whose steps are mostly the naps, so that on
// this 2-core machine another test's load (which can slow one replica's compute, and would
// rightly be reported) cannot unbalance it. A small MLP (66 KB of gradients), so that no load
// can make its all-reduce a fifth of a step either (with 5 MB of gradients, a build running
// beside the tests once did: "communication is exposed 23%", rightly).
TEST(DeviceUseRun, ABalancedRunBlamesNoDevice) {
  const UseVerdict v = run_with({.slow_forward = kEveryReplica, .widths = {kFeatures, 64, 10}});
  expect_consistent(v);
  EXPECT_EQ(v.finding, Finding::kAllUsed) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "both are used")) << v.sentence;
  // Each device's nap is its own step's work (the stream waits for the host to enqueue it),
  // on both devices alike: neither is idle or waiting for its input.
  for (const DeviceUse& d : v.devices) {
    EXPECT_GE(d.compute_ms / static_cast<double>(d.steps), 40.0) << d.device.str();
    EXPECT_LT(d.share(d.idle_ms + d.input_ms), kVerdictThreshold) << d.device.str();
  }
}

// ---- pipelines -----------------------------------------------------------------------------

TEST(DeviceUseVerdict, APipelineBubbleNamesTheStagesAndTheSchedulesOwn) {
  DeviceUse stage0 = use(0, 1, 60, 2, 1), stage1 = use(1, 1, 55, 2, 1);
  stage0.bubble_ms = 36;
  stage1.bubble_ms = 41;
  stage0.window_ms += 36;
  stage1.window_ms += 41;
  const UseVerdict v = judge_device_use({stage0, stage1}, 1.0 / 3.0);
  EXPECT_EQ(v.finding, Finding::kPipelineBubble);
  EXPECT_EQ(v.sentence,
            "pipeline stages host:0 and host:1 wait 36% / 41% of each step for their neighbours' "
            "activations and gradients (the schedule's own bubble is 33%): more micro-batches per "
            "step (--micro-batches) shrink the bubble");
  EXPECT_TRUE(contains(use_verdict_lines(v)[0], "bubble  36.0%")) << use_verdict_lines(v)[0];
}

TEST(DeviceUseVerdict, ABubbleFarPastTheSchedulesIsUnequalStages) {
  // host:1 computes a fifth of what host:0 does and waits 70% of each step for it.
  DeviceUse stage0 = use(0, 1, 90, 2, 1), stage1 = use(1, 1, 18, 2, 9);
  stage1.bubble_ms = 70;
  stage1.window_ms += 70;
  const UseVerdict v = judge_device_use({stage0, stage1}, 1.0 / 9.0);
  EXPECT_EQ(v.finding, Finding::kPipelineBubble);
  EXPECT_EQ(v.named, (std::vector<int>{1}));
  EXPECT_EQ(v.sentence,
            "pipeline stage host:1 waits 70% of each step for its neighbours, far more than the "
            "schedule's own bubble (11%): the stages' work is unequal (compute 9.00 ms / 1.80 ms "
            "per step on host:0 and host:1); move layers from host:0's stage to the others");
}

// A pipeline of 2 stages and 2 micro-batches idles a third of each step by its schedule
// ((p - 1) / (m + p - 1)); its verdict says so, with the parts adding up per stage.
TEST(DeviceUseRun, APipelineOfTwoMicroBatchesIsBubbleBound) {
  PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 2;
  Pipeline pipe({host(0), host(1)}, mlp_factory({kFeatures, 1024, 1024, 10}),
                make_optimizer_factory({"sgd", 0.01f}), options);
  const data::Batch batch = testing::random_batch(256, kFeatures, 3);
  for (int i = 0; i < kSteps; ++i) pipe.step(batch);
  const UseVerdict v = pipe.device_use();
  ASSERT_EQ(v.devices.size(), 2u);
  for (const DeviceUse& d : v.devices) {
    EXPECT_EQ(d.steps, kSteps - 3);
    EXPECT_GT(d.compute_ms, 0.0);
    EXPECT_NEAR(d.input_ms + d.compute_ms + d.comm_wait_ms + d.idle_ms + d.bubble_ms, d.window_ms,
                1e-9);
  }
  EXPECT_NEAR(v.pipeline_theory, 1.0 / 3.0, 1e-12);
  EXPECT_EQ(v.finding, Finding::kPipelineBubble) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "schedule's own bubble")) << v.sentence;
  EXPECT_TRUE(contains(v.sentence, "33%")) << v.sentence;
}

}  // namespace
}  // namespace ls
