// The failure paths of DataParallel on host devices, one test per fault: an exception in one
// replica's forward, backward or optimizer step, a replica that never issues a collective
// (watchdog timeout), a replica stuck in its own code, mismatched collectives (desync), NaN on
// one replica, a run of non-finite steps. Each failure must reach the caller as one clear
// ls::Error, quickly, with no thread left blocked and the DataParallel destroyable.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <cmath>
#include <optional>
#include <random>

#include <lockstep/error.h>
#include <lockstep/data_parallel.h>
#include "parallel/fault_injection.h"
#include "parallel/random_batch.h"

namespace ls {
namespace {

using Clock = std::chrono::steady_clock;
using Kind = testing::Fault::Kind;
using testing::Fault;

using testing::random_batch;

Fault with_fault(Kind kind, int replica, int64_t step) { return {kind, replica, step, {}}; }

DataParallelOptions quick_timeout() {
  DataParallelOptions options;
  options.timeout = std::chrono::milliseconds(500);
  // The flight recorder files of these failures (tests/doctor/flight_analysis_test.cpp reads
  // them): in one folder of their own, not loose in the temporary directory.
  options.flight_recorder_dir =
      (std::filesystem::temp_directory_path() / "lockstep-failure-test-flights").string();
  return options;
}

// A 16-32-10 MLP on `devices` host devices with `fault` injected (tests/parallel/fault_injection.h).
std::unique_ptr<DataParallel> faulty_run(const Fault& fault, int devices,
                                         const DataParallelOptions& options = quick_timeout(),
                                         std::vector<int64_t> widths = {16, 32, 10}) {
  return make_data_parallel(parse_devices("host:" + std::to_string(devices)),
                            testing::with_fault(mlp_factory(std::move(widths)), fault),
                            testing::with_fault(make_optimizer_factory({}), fault), options,
                            testing::with_fault(fault));
}

// Runs steps until one throws; returns its message and checks the failure and the tear-down
// together took less than `limit`.
// When `kind` is given, the error must be of that kind.
std::string failure_of(const Fault& fault, int devices = 2, double limit_s = 2.0,
                       std::optional<ErrorKind> kind = std::nullopt) {
  const Clock::time_point start = Clock::now();
  std::string message;
  {
    std::unique_ptr<DataParallel> run = faulty_run(fault, devices);
    DataParallel& dp = *run;
    const data::Batch batch = random_batch(8, 16, 1);
    for (int s = 0; s < 5 && message.empty(); ++s) {
      try {
        dp.step(batch);
      } catch (const Error& e) {
        message = e.what();
        if (kind) {
          EXPECT_EQ(std::string(error_kind_name(e.kind())), error_kind_name(*kind)) << message;
        }
      }
    }
    EXPECT_FALSE(message.empty()) << "no step failed";
    EXPECT_THROW(dp.step(batch), Error) << "usable after a failure";
  }  // destroyed here: every thread must be joinable
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(elapsed, limit_s) << message;
  return message;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

TEST(Failure, ExceptionInForwardNamesReplicaStepAndPhase) {
  const std::string m = failure_of(with_fault(Kind::kThrowInForward, 1, 2));
  expect_contains(m, "replica 1 on host:1 failed in step (step 2, forward)");
  expect_contains(m, "injected fault: exception in forward");
}

TEST(Failure, ExceptionInBackwardNamesReplicaStepAndPhase) {
  const std::string m = failure_of(with_fault(Kind::kThrowInBackward, 0, 3), 4);
  expect_contains(
      m, "replica 0 on host:0 failed in step (step 3, backward)");  // 4 devices, 2 rows each
  expect_contains(m, "injected fault: exception in backward");
}

TEST(Failure, ExceptionInOptimizerNamesReplicaStepAndPhase) {
  const std::string m = failure_of(with_fault(Kind::kThrowInOptimizer, 1, 3), 4);
  expect_contains(m, "replica 1 on host:1 failed in step (step 3, optimizer)");
  expect_contains(m, "injected fault: exception in optimizer");
}

TEST(Failure, MissingCollectiveTimesOutWithAReportOfEveryReplica) {
  const std::string m =
      failure_of(with_fault(Kind::kSkipCollective, 1, 2), 2, 2.5, ErrorKind::kTimeout);
  expect_contains(m, "collective timeout (0.5 s)");
  expect_contains(m, "replica 0 (host:0) waits in all_reduce #");
  expect_contains(m, "(loss, 4 B)");
  expect_contains(m, "replica 1 (host:1) never issued #");
}

TEST(Failure, ReplicaStuckInItsOwnCodeIsNamedWithItsPhase) {
  Fault stall = with_fault(Kind::kStall, 1, 2);
  stall.stall = std::chrono::milliseconds(1200);
  const std::string m = failure_of(stall, 2, 3.0, ErrorKind::kTimeout);
  expect_contains(m, "collective timeout");
  expect_contains(m, "replica 0 (host:0) waits in all_reduce #");
  expect_contains(m, "replica 1 (host:1) never issued #");
  expect_contains(m, "it is in forward of step 2");
}

TEST(Failure, MismatchedCollectiveSizesAreADesyncNotAHang) {
  const std::string m = failure_of(with_fault(Kind::kWrongCount, 1, 2), 2, 2.0, ErrorKind::kDesync);
  expect_contains(m, "collective desync at #");
  expect_contains(m, "bucket 0");
  // Both fingerprints, one element apart.
  const std::string counts = m.substr(m.find("desync"));
  EXPECT_NE(counts.find("count="), counts.rfind("count=")) << m;
}

TEST(Failure, NaNOnOneReplicaSkipsTheStepOnEveryReplica) {
  std::unique_ptr<DataParallel> run = faulty_run(with_fault(Kind::kNaN, 1, 2), 2);
  DataParallel& dp = *run;
  const data::Batch batch = random_batch(8, 16, 1);
  EXPECT_FALSE(dp.step(batch).skipped);
  const std::vector<float> before = dp.parameters(0);
  const StepResult nan_step = dp.step(batch);
  EXPECT_TRUE(nan_step.skipped);
  EXPECT_EQ(dp.skipped_steps(), 1);
  EXPECT_EQ(dp.parameters(0), before);  // nothing moved...
  EXPECT_EQ(dp.parameters(1), before);  // ...on any replica
  EXPECT_FALSE(dp.step(batch).skipped);  // and training goes on
  EXPECT_EQ(dp.parameters(0), dp.parameters(1));
}

TEST(Failure, ARunOfNonFiniteStepsIsAnError) {
  DataParallelOptions options;
  options.max_consecutive_skips = 3;
  DataParallel dp(parse_devices("host:2"), mlp_factory({16, 10}), make_optimizer_factory({}),
                  options);
  data::Batch batch = random_batch(8, 16, 1);
  batch.images[3] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(dp.step(batch).skipped);
  EXPECT_TRUE(dp.step(batch).skipped);
  try {
    dp.step(batch);
    FAIL() << "the third skipped step in a row did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNonFinite);
    expect_contains(e.what(), "3 steps in a row");
    expect_contains(e.what(), "non-finite");
  }
}

TEST(Failure, HeartbeatReportsWhereAReplicaIs) {
  Fault stall = with_fault(Kind::kStall, 0, 1);
  stall.stall = std::chrono::milliseconds(300);
  DataParallelOptions options;
  options.timeout = std::chrono::seconds(5);
  options.heartbeat_interval = std::chrono::milliseconds(50);
  std::vector<std::string> beats;
  options.heartbeat = [&](const std::string& line) { beats.push_back(line); };
  faulty_run(stall, 2, options, {16, 10})->step(random_batch(8, 16, 1));
  ASSERT_FALSE(beats.empty());
  expect_contains(beats.back(), "heartbeat: step 1");
  expect_contains(beats.back(), "replica 0 (host:0)");
}

TEST(Failure, BadInputIsAClearError) {
  EXPECT_THROW(DataParallel(std::vector<Device>{}, mlp_factory({4, 2}), make_optimizer_factory({})),
               Error);
  const std::vector<Device> twice{{DeviceKind::kHost, 0}, {DeviceKind::kHost, 0}};
  try {
    DataParallel dp(twice, mlp_factory({4, 2}), make_optimizer_factory({}));
    FAIL();
  } catch (const Error& e) {
    expect_contains(e.what(), "appears twice");
  }
  DataParallel dp(parse_devices("host:2"), mlp_factory({16, 10}), make_optimizer_factory({}));
  try {
    dp.step(random_batch(8, 12, 1));  // 12 features, the model takes 16
    FAIL();
  } catch (const Error& e) {
    expect_contains(e.what(), "linear");
  }
  data::Dataset no_examples;
  no_examples.name = "empty";
  try {
    dp.evaluate(no_examples, 10);
    FAIL();
  } catch (const Error& e) {
    expect_contains(e.what(), "is empty");
  }
  data::Batch empty;
  EXPECT_THROW(
      DataParallel(parse_devices("host:1"), mlp_factory({16, 10}), make_optimizer_factory({}))
          .step(empty),
      Error);
  EXPECT_THROW(make_optimizer_factory({"adam"}), Error);
}

}  // namespace
}  // namespace ls
