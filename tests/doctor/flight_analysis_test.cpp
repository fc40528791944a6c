// The flight recorder on disk and lockstep-doctor --flight's analysis of it: files written by
// write_flight_record (parallel/observability/flight_dump.h) read back and analysed
// (tools/doctor/flight_analysis.h) for a replica behind, collectives that disagree, replicas
// spread over two processes' files, a missing process, nothing wrong, and bad files; then
// DataParallel end to end: a skipped collective (the watchdog's timeout) and a short one (a
// desync) on host devices leave a file the error names, whose analysis names the replica and the
// collective.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/data_parallel.h>
#include <lockstep/error.h>
#include <lockstep/nn/module.h>
#include <lockstep/pipeline.h>
#include "engine/core/host/host_device.h"
#include "parallel/fault_injection.h"
#include "parallel/observability/flight_dump.h"
#include "parallel/random_batch.h"
#include "tools/doctor/flight_analysis.h"

namespace ls::doctor {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A fresh directory per test, removed at the end.
class FlightTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("lockstep-flight-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Replica `rank` on host:rank that issued loss-sized all-reduces #1..#last, all completed but
  // `started_last` leaves the last one started.
  static ReplicaProgress replica(int rank, int64_t last, bool started_last, Phase phase,
                                 int64_t step) {
    ReplicaProgress r;
    r.rank = rank;
    r.device = Device{DeviceKind::kHost, rank};
    r.phase = phase;
    r.step = step;
    for (int64_t seq = 1; seq <= last; ++seq) {
      CollectiveRecord c;
      c.desc = CollectiveDesc::all_reduce(nullptr, nullptr, seq % 2 == 1 ? 256 : 1, DType::kF32,
                                          ReduceOp::kSum);
      c.desc.seq = seq;
      c.desc.label = seq % 2 == 1 ? "bucket 0" : "loss";
      c.enqueued = Clock::now();
      c.started = true;
      c.completed = !(started_last && seq == last);
      r.records.push_back(c);
    }
    return r;
  }

  std::string write(std::vector<ReplicaProgress> replicas, int process = 0, int processes = 1) {
    FlightRecord record{.reason = "timeout",
                        .report = "test",
                        .process = process,
                        .processes = processes,
                        .replicas = std::move(replicas),
                        .stages = {},
                        .now = Clock::now()};
    return write_flight_record(dir_.string(), record);
  }

  std::string joined(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& l : lines) out += l + "\n";
    return out;
  }

  fs::path dir_;
};

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_F(FlightTest, NamesTheReplicaBehindAndTheCollectiveItNeverIssued) {
  const std::string path =
      write({replica(0, 4, true, Phase::kReduce, 2), replica(1, 3, false, Phase::kForward, 2)});
  const FlightFiles files = read_flight_files({path});
  ASSERT_EQ(files.replicas.size(), 2u);
  EXPECT_EQ(files.replicas[0].collectives.size(), 4u);
  const std::string text = joined(analyse_flight(files));
  EXPECT_TRUE(has(text,
                  "replica 1 (host:1) is behind: it never issued #4, all_reduce #4 (loss, 4 B) "
                  "[f32, count=1, sum], which replica 0 issued; its last collective is #3 "
                  "(completed), and it is in forward of step 2"))
      << text;
  EXPECT_TRUE(has(text, "replica 0 (host:0) waits in all_reduce #4 (loss, 4 B)")) << text;
  EXPECT_FALSE(has(text, "disagree")) << text;
}

TEST_F(FlightTest, NamesTheFirstCollectiveWhoseSizesDisagree) {
  ReplicaProgress short_one = replica(1, 3, false, Phase::kBackward, 1);
  short_one.records[2].desc.count = 255;  // #3, bucket 0, one element short
  const std::string text = joined(analyse_flight(
      read_flight_files({write({replica(0, 3, false, Phase::kBackward, 1), short_one})})));
  EXPECT_TRUE(has(text,
                  "collectives disagree at #3: replica 0 (host:0) issued all_reduce #3 (bucket 0, "
                  "1.0 KiB) [f32, count=256, sum], replica 1 (host:1) issued all_reduce #3 "
                  "(bucket 0, 1020 B) [f32, count=255, sum]"))
      << text;
}

TEST_F(FlightTest, ReadsTheFilesOfTwoProcessesAsOneRunAndSaysWhichIsMissing) {
  const std::string p0 = write({replica(0, 4, true, Phase::kReduce, 2)}, 0, 2);
  const std::string p1 = write({replica(1, 3, false, Phase::kForward, 2)}, 1, 2);
  const std::string both = joined(analyse_flight(read_flight_files({p1, p0})));
  EXPECT_TRUE(has(both, "replica 1 (host:1) is behind: it never issued #4")) << both;
  EXPECT_FALSE(has(both, "no file from process")) << both;
  const std::string one = joined(analyse_flight(read_flight_files({p0})));
  EXPECT_TRUE(has(one, "no file from process 1 of 2")) << one;
  // The same process twice is refused, as is a replica in two files.
  EXPECT_THROW(read_flight_files({p0, p0}), Error);
}

TEST_F(FlightTest, SaysWhenNoCollectiveIsMissingOrStuck) {
  const std::string text = joined(analyse_flight(read_flight_files({write(
      {replica(0, 4, false, Phase::kForward, 3), replica(1, 4, false, Phase::kForward, 3)})})));
  EXPECT_TRUE(has(text, "every replica issued and completed the same collectives, through #4"))
      << text;
}

// A Pipeline's file: stage 1 stalled in an action whose input has arrived, stage 0 waiting for
// its gradient.
TEST_F(FlightTest, NamesThePipelineStageTheOthersWaitFor) {
  StageProgress waiting{0, 0, Device{DeviceKind::kHost, 0},
                        3, "receive gradient of micro-batch 1",
                        5, 6, 8, "backward of micro-batch 1", false};
  StageProgress stalled{1, 0, Device{DeviceKind::kHost, 1},
                        3, "receive activations of micro-batch 3",
                        4, 5, 8, "backward of micro-batch 1", true};
  FlightRecord record{.reason = "timeout",
                      .report = "test",
                      .process = 0,
                      .processes = 1,
                      .replicas = {},
                      .stages = {waiting, stalled},
                      .now = Clock::now()};
  const FlightFiles files = read_flight_files({write_flight_record(dir_.string(), record)});
  ASSERT_EQ(files.stages.size(), 2u);
  EXPECT_TRUE(files.replicas.empty());
  const std::vector<std::string> lines = analyse_flight(files);
  ASSERT_EQ(lines.size(), 2u) << joined(lines);
  EXPECT_EQ(lines[0],
            "stage 1 of pipeline 0 (host:1) stalled in backward of micro-batch 1: its input has "
            "arrived and the action is enqueued, but the device has not finished it; the other "
            "stages wait for it (its device ran 4 of 8 actions of step 3; its host thread is in "
            "receive activations of micro-batch 3)");
  EXPECT_EQ(lines[1],
            "stage 0 of pipeline 0 (host:0) waits for the gradient of micro-batch 1 from stage 1 "
            "for its backward of micro-batch 1 (its device ran 5 of 8 actions of step 3; its host "
            "thread is in receive gradient of micro-batch 1)");
  // ZB-H1: a stage stalled in a weight gradient, whose input (its own backward) is always there.
  StageProgress in_weight = stalled;
  in_weight.next_action = "weight gradient of micro-batch 0";
  record.stages = {waiting, in_weight};
  EXPECT_EQ(analyse_flight(read_flight_files({write_flight_record(dir_.string(), record)}))[0],
            "stage 1 of pipeline 0 (host:1) stalled in weight gradient of micro-batch 0: its "
            "input has arrived and the action is enqueued, but the device has not finished it; "
            "the other stages wait for it (its device ran 4 of 8 actions of step 3; its host "
            "thread is in receive activations of micro-batch 3)");
  in_weight.input_ready = false;  // never written so: a weight gradient's input is its own B
  record.stages = {waiting, in_weight};
  EXPECT_THROW(read_flight_files({write_flight_record(dir_.string(), record)}), Error);
  // Every action run: the stall came after them.
  waiting.actions_done = stalled.actions_done = 8;
  waiting.next_action = stalled.next_action = "";
  record.stages = {waiting, stalled};
  EXPECT_EQ(joined(analyse_flight(read_flight_files({write_flight_record(dir_.string(), record)}))),
            "every stage ran all its actions of step 3: the stall came after them (the gradient "
            "sums across pipelines, the optimizer, or between steps)\n");
}

TEST_F(FlightTest, BadFilesAreClearErrors) {
  fs::create_directories(dir_);
  const auto message = [](const std::vector<std::string>& paths) {
    try {
      read_flight_files(paths);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_TRUE(has(message({(dir_ / "missing.json").string()}), "cannot read it")) << "missing";
  const std::string not_json = (dir_ / "not.json").string();
  std::ofstream(not_json) << "{ nope";
  EXPECT_TRUE(has(message({not_json}), "not.json")) << message({not_json});
  const std::string other = (dir_ / "other.json").string();
  std::ofstream(other) << R"({"format": "something-else"})";
  EXPECT_TRUE(has(message({other}), "not a lockstep flight recorder file")) << message({other});
  EXPECT_TRUE(has(message({}), "at least one file"));
}

// ---- end to end: DataParallel on host devices, faults injected -----------------------------

// The flight recorder file an error names, read and analysed.
std::string analysis_of_error_file(const std::string& message) {
  const std::string marker = "lockstep-doctor --flight ";
  const size_t at = message.find(marker);
  EXPECT_NE(at, std::string::npos) << message;
  if (at == std::string::npos) return "";
  const size_t begin = at + marker.size();
  const std::string path = message.substr(begin, message.find(')', begin) - begin);
  std::string out;
  for (const std::string& line : analyse_flight(read_flight_files({path}))) out += line + "\n";
  return out;
}

std::string error_of_faulty_run(testing::Fault::Kind kind, const fs::path& dir) {
  const testing::Fault fault{kind, 1, 2, {}};
  DataParallelOptions options;
  options.timeout = std::chrono::milliseconds(500);
  options.flight_recorder_dir = dir.string();
  std::unique_ptr<DataParallel> dp = make_data_parallel(
      parse_devices("host:2"), testing::with_fault(mlp_factory({16, 32, 10}), fault),
      testing::with_fault(make_optimizer_factory({}), fault), options, testing::with_fault(fault));
  const data::Batch batch = testing::random_batch(8, 16, 1);
  for (int step = 0; step < 4; ++step) {
    try {
      dp->step(batch);
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "no error";
}

TEST_F(FlightTest, ASkippedCollectiveLeavesAFileThatNamesTheReplicaBehind) {
  const std::string message = error_of_faulty_run(testing::Fault::Kind::kSkipCollective, dir_);
  const std::string text = analysis_of_error_file(message);
  EXPECT_TRUE(has(text, "replica 1 (host:1) is behind: it never issued #")) << text << message;
  EXPECT_TRUE(has(text, "(loss, 4 B) [f32, count=1, sum], which replica 0 issued")) << text;
  EXPECT_TRUE(has(text, "replica 0 (host:0) waits in all_reduce #")) << text;
}

TEST_F(FlightTest, AShortCollectiveLeavesAFileThatNamesTheSizesThatDisagree) {
  const std::string message = error_of_faulty_run(testing::Fault::Kind::kWrongCount, dir_);
  EXPECT_TRUE(has(message, "collective desync at #")) << message;
  const std::string text = analysis_of_error_file(message);
  EXPECT_TRUE(has(text, "collectives disagree at #")) << text << message;
  EXPECT_TRUE(has(text, "bucket 0")) << text;
  // The replica whose collective was refused stopped there; it is not "behind".
  EXPECT_TRUE(has(text, "which the desync check refused")) << text;
  EXPECT_FALSE(has(text, "is behind")) << text;
}

// ---- end to end: a Pipeline whose stage 1 stalls ------------------------------------------

// Passes its input through; its third forward call (micro-batch 2 on the stage holding it) makes
// the stream sleep past the pipeline's timeout.
class StallingLayer final : public nn::Module {
 public:
  Var forward(Tape& tape, const Var& input) override {
    if (calls_++ == 2) {
      host_enqueue(tape.stream(),
                   [] { std::this_thread::sleep_for(std::chrono::milliseconds(1500)); });
    }
    return input;
  }

 private:
  int calls_ = 0;
};

TEST_F(FlightTest, APipelineStallLeavesAFileThatNamesTheStalledStage) {
  PipelineOptions options;
  options.stages = 2;
  options.micro_batches = 4;
  options.timeout = std::chrono::milliseconds(300);
  options.flight_recorder_dir = dir_.string();
  const ModelFactory model = [] {
    auto m = std::make_unique<nn::Sequential>();
    m->add(std::make_unique<nn::Linear>(20, 16));
    m->add(std::make_unique<nn::ReLU>());
    m->add(std::make_unique<nn::Linear>(16, 16));
    m->add(std::make_unique<StallingLayer>());
    m->add(std::make_unique<nn::Linear>(16, 10));
    return std::unique_ptr<nn::Module>(std::move(m));
  };
  Pipeline pipe(parse_devices("host:2"), model, make_optimizer_factory({"sgd", 0.01f}), options);
  std::string message = "no error";
  try {
    pipe.step(testing::random_batch(16, 20, 1));
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_TRUE(has(message, "stage 1 on host:1 stalled in forward of micro-batch 2")) << message;
  EXPECT_TRUE(has(message, "where every stage stood is in ")) << message;
  const std::string text = analysis_of_error_file(message);
  EXPECT_TRUE(has(text, "stage 1 of pipeline 0 (host:1) stalled in forward of micro-batch 2: its "
                        "input has arrived"))
      << text << message;
  EXPECT_TRUE(has(text, "stage 0 of pipeline 0 (host:0) waits for the gradient of micro-batch"))
      << text;
}

}  // namespace
}  // namespace ls::doctor
