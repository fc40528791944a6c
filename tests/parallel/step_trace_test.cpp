// The Chrome trace of lockstep/trainer.h's TraceOptions (parallel/observability/step_trace.h):
// a real two-device run's file checked against the trace-event format's rules (every event of
// a known phase with its fields, spans in time order and never overlapping on a track), against
// what the run did (four phases per device per traced step, every gradient byte in a launch,
// the caller's enqueues and waits), and against the caller's own clock (the devices' busy time
// within 5% of the steps' wall time); and bad trace options.
#include "parallel/observability/step_trace.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/clock.h>
#include "engine/core/json_reader.h"
#include <lockstep/data_parallel.h>
#include <lockstep/pipeline.h>
#include "parallel/random_batch.h"

namespace ls {
namespace {

namespace fs = std::filesystem;

std::string temp_trace(const std::string& name) {
  return (fs::temp_directory_path() /
          ("lockstep-trace-" + std::to_string(::getpid()) + "-" + name + ".json"))
      .string();
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Traced {
  JsonValue file;
  double caller_wall_us = 0;   // the caller's own clock around the traced steps
  int64_t gradient_bytes = 0;  // what the buckets all-reduce, padding included
  int ticks = 0;               // the application thread's spans, kept or not
};

// Trains 6 steps on two host devices, tracing steps 4-6, each step() timed by the caller.
Traced run_traced(const std::string& path) {
  DataParallelOptions options;
  options.trace.path = path;
  options.trace.first_step = 4;
  options.trace.last_step = 6;
  DataParallel dp({Device{DeviceKind::kHost, 0}, Device{DeviceKind::kHost, 1}},
                  mlp_factory({256, 1024, 1024, 10}), make_optimizer_factory({"sgd", 0.01f}),
                  options);
  // Steps of about 0.25 s here, so the host's part between steps (a few thread hand-offs, each
  // up to a scheduler tick on a busy machine) stays small beside them.
  const data::Batch batch = testing::random_batch(4096, 256, 5);
  Traced out;
  for (const Bucket& b : dp.buckets()) out.gradient_bytes += b.count * 4;
  // An application thread (a data loader, say) that puts a 5 ms span on the trace every 10 ms
  // from before the first step to after the last: only those around the traced steps are kept.
  std::atomic<bool> stop{false};
  std::atomic<int> ticks{0};
  std::thread loader([&] {
    while (!stop) {
      const int64_t begin = steady_now_ns();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      dp.trace_span("data loader", "tick " + std::to_string(ticks.load()), begin,
                    steady_now_ns());
      ++ticks;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  while (ticks < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  for (int64_t step = 1; step <= 6; ++step) {
    const auto start = std::chrono::steady_clock::now();
    dp.step(batch);
    if (step >= 4) {
      out.caller_wall_us +=
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count();
    }
    if (step == 5) {  // a checkpoint inside the traced steps shows on the caller's track
      dp.save((fs::temp_directory_path() /
               ("lockstep-trace-" + std::to_string(::getpid()) + "-checkpoint"))
                  .string());
    }
  }
  const int before_stop = ticks;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  stop = true;
  loader.join();
  out.ticks = ticks;
  EXPECT_GT(ticks, before_stop) << "the loader's last spans came after the file was written";
  fs::remove_all(fs::temp_directory_path() /
                 ("lockstep-trace-" + std::to_string(::getpid()) + "-checkpoint"));
  out.file = parse_json(read_text(path), path);
  return out;
}

struct Span {
  std::string name;
  double ts, dur;
  int64_t step;
  const JsonValue* event;
};

// The file's times are microseconds with 3 decimals: each is within 0.0005 us of the exact time,
// a sum of two within 0.001 us, and a comparison of two sums within twice that.
double rounding(double) { return 2e-3; }

struct ParsedTrace {
  std::map<int64_t, std::string> track_names;
  std::map<int64_t, std::vector<Span>> tracks;
  int counters = 0;
};

// Reads a trace's events and checks them against the trace-event format's rules: known phases
// with their fields, every track named, and on every track spans in time order that nest or
// follow one another.
ParsedTrace read_checked(const JsonValue& file) {
  ParsedTrace parsed;
  auto& track_names = parsed.track_names;
  auto& tracks = parsed.tracks;
  auto& counters = parsed.counters;
  const auto& events = file.find("traceEvents")->items();
  EXPECT_EQ(file.find("displayTimeUnit")->as_string(), "ms");
  for (const JsonValue& e : events) {
    const std::string ph = e.find("ph")->as_string();
    EXPECT_TRUE(ph == "M" || ph == "X" || ph == "C") << ph;
    EXPECT_EQ(e.find("pid")->as_int64(), 0);
    if (e.find("name") == nullptr) {
      ADD_FAILURE() << "an event without a name";
      continue;
    }
    if (ph == "M") {
      if (e.find("name")->as_string() == "thread_name") {
        track_names[e.find("tid")->as_int64()] = e.find("args")->find("name")->as_string();
      }
      continue;
    }
    const double ts = e.find("ts")->as_double();
    EXPECT_GE(ts, 0.0);
    if (ph == "C") {
      ++counters;
      EXPECT_GT(e.find("args")->find("MiB")->as_double(), 0.0);
      continue;
    }
    const double dur = e.find("dur")->as_double();
    EXPECT_GE(dur, 0.0);
    // The application's spans (Trainer::trace_span) belong to no step.
    const JsonValue* step = e.find("args")->find("step");
    tracks[e.find("tid")->as_int64()].push_back(
        {e.find("name")->as_string(), ts, dur, step != nullptr ? step->as_int64() : -1, &e});
  }
  // A track is a stream or one thread: its spans are in time order, and each one either lies
  // inside the span still open before it (a layer inside forward + backward) or starts after
  // it has ended (up to the file's rounding: see rounding()).
  for (const auto& [tid, spans] : tracks) {
    EXPECT_TRUE(track_names.count(tid)) << "track " << tid << " has no name";
    std::vector<const Span*> open;
    for (const Span& s : spans) {
      while (!open.empty() &&
             s.ts >= open.back()->ts + open.back()->dur - rounding(s.ts + s.dur)) {
        open.pop_back();
      }
      if (!open.empty()) {
        EXPECT_GE(s.ts, open.back()->ts - rounding(s.ts));
        EXPECT_LE(s.ts + s.dur, open.back()->ts + open.back()->dur + rounding(s.ts + s.dur))
            << track_names[tid] << ": '" << s.name << "' of step " << s.step << " overlaps '"
            << open.back()->name << "' without lying inside it";
      }
      open.push_back(&s);
    }
  }

  return parsed;
}

TEST(StepTrace, ATwoDeviceRunsTraceFollowsTheFormatAndTheRun) {
  const std::string path = temp_trace("run");
  fs::remove(path);
  const Traced traced = run_traced(path);
  ParsedTrace parsed = read_checked(traced.file);
  auto& track_names = parsed.track_names;
  auto& tracks = parsed.tracks;
  const int counters = parsed.counters;
  EXPECT_EQ(track_names[1], "caller thread (steps enqueued, results awaited)");
  EXPECT_EQ(track_names[10], "host:0 (replica 0) compute stream");
  EXPECT_EQ(track_names[14], "host:1 (replica 1) communication stream");
  EXPECT_EQ(counters, 2 * 3);  // each device's memory at each traced step's end

  // The caller enqueued and awaited each traced step.
  std::set<std::string> caller;
  for (const Span& s : tracks[1]) caller.insert(s.name);
  for (int step = 4; step <= 6; ++step) {
    EXPECT_TRUE(caller.count("step " + std::to_string(step) + " enqueued")) << step;
    EXPECT_TRUE(caller.count("step " + std::to_string(step) + " result (waiting)")) << step;
  }
  EXPECT_TRUE(caller.count("checkpoint save"));

  // Each replica's own host thread issued and collected each traced step.
  for (int device = 0; device < 2; ++device) {
    const std::string d = std::to_string(device);
    EXPECT_EQ(track_names[12 + 3 * device], "host:" + d + " (replica " + d + ") host thread");
    std::multiset<std::string> thread;
    for (const Span& s : tracks[12 + 3 * device]) thread.insert(s.name);
    EXPECT_EQ(thread, (std::multiset<std::string>{"issue step 4", "collect step 4", "issue step 5",
                                                  "collect step 5", "issue step 6",
                                                  "collect step 6"}));
  }

  // The application's thread: its spans that overlap the traced steps, and no other, with no
  // gap among them.
  double window_begin = 1e300, window_end = -1e300;
  int64_t loader_tid = -1;
  for (const auto& [tid, name] : track_names) {
    if (name == "data loader") loader_tid = tid;
  }
  ASSERT_GE(loader_tid, 16) << "no track for the application's thread (after both devices' six)";
  for (const auto& [tid, spans] : tracks) {
    if (tid == loader_tid) continue;
    for (const Span& s : spans) {
      window_begin = std::min(window_begin, s.ts);
      window_end = std::max(window_end, s.ts + s.dur);
    }
  }
  std::vector<int> kept;
  for (const Span& s : tracks[loader_tid]) {
    EXPECT_EQ(s.step, -1);
    EXPECT_GE(s.ts + s.dur, window_begin - rounding(0)) << s.name << " ends before the steps";
    EXPECT_LE(s.ts, window_end + rounding(0)) << s.name << " begins after the steps";
    kept.push_back(std::stoi(s.name.substr(std::string("tick ").size())));
  }
  ASSERT_FALSE(kept.empty());
  EXPECT_LT(static_cast<int>(kept.size()), traced.ticks);
  for (size_t k = 1; k < kept.size(); ++k) EXPECT_EQ(kept[k], kept[k - 1] + 1);

  const std::vector<std::string> phases = {"input", "forward + backward",
                                           "waiting for gradient sums", "loss + optimizer"};
  for (int device = 0; device < 2; ++device) {
    SCOPED_TRACE("device " + std::to_string(device));
    // The step's phases, and within forward + backward each layer of the MLP (Sequential: two
    // Linear and a ReLU between them) forward and backward, once per step.
    std::vector<Span> compute;
    std::map<std::string, int> layer_spans;
    for (const Span& s : tracks[10 + 3 * device]) {
      const bool phase = std::find(phases.begin(), phases.end(), s.name) != phases.end();
      if (phase) compute.push_back(s);
      if (!phase) ++layer_spans[s.name];
    }
    EXPECT_EQ(layer_spans, (std::map<std::string, int>{{"0 forward", 3},
                                                       {"1 forward", 3},
                                                       {"2 forward", 3},
                                                       {"3 forward", 3},
                                                       {"4 forward", 3},
                                                       {"0 backward", 3},
                                                       {"1 backward", 3},
                                                       {"2 backward", 3},
                                                       {"3 backward", 3},
                                                       {"4 backward", 3}}));
    ASSERT_EQ(compute.size(), 3 * phases.size());
    double busy_us = 0;
    for (size_t i = 0; i < compute.size(); ++i) {
      EXPECT_EQ(compute[i].name, phases[i % 4]);
      EXPECT_EQ(compute[i].step, 4 + static_cast<int64_t>(i / 4));
      // A step's four phases tile it: each starts where the one before ended.
      if (i % 4 > 0) {
        EXPECT_NEAR(compute[i].ts, compute[i - 1].ts + compute[i - 1].dur,
                    rounding(compute[i].ts));
      }
      busy_us += compute[i].dur;
    }
    // Every gradient byte travels in some launch of every traced step.
    std::map<int64_t, int64_t> bytes_per_step;
    for (const Span& launch : tracks[11 + 3 * device]) {
      bytes_per_step[launch.step] += launch.event->find("args")->find("bytes")->as_int64();
    }
    ASSERT_EQ(bytes_per_step.size(), 3u);
    for (const auto& [step, bytes] : bytes_per_step)
      EXPECT_EQ(bytes, traced.gradient_bytes) << step;
    // The device's time in the traced steps is the steps' wall time on the caller's clock, but
    // for the host's work between them (its result read, the next step enqueued).
    EXPECT_LE(busy_us, traced.caller_wall_us);
    EXPECT_GE(busy_us, 0.95 * traced.caller_wall_us)
        << "busy " << busy_us << " us of " << traced.caller_wall_us << " us";
  }
  fs::remove(path);
}

// A pipeline's stages: each traced step holds, on each stage's compute stream, every
// micro-batch's forward and backward (each from its input's arrival), then the stage's gradient
// sums and its optimizer, and the caller's thread holds the step.
TEST(StepTrace, APipelinesStagesShowEveryMicroBatch) {
  const std::string path = temp_trace("pipeline");
  fs::remove(path);
  {
    PipelineOptions options;
    options.stages = 2;
    options.micro_batches = 3;
    options.trace.path = path;
    options.trace.first_step = 2;
    options.trace.last_step = 3;
    Pipeline pipe({Device{DeviceKind::kHost, 0}, Device{DeviceKind::kHost, 1}},
                  mlp_factory({64, 128, 128, 10}), make_optimizer_factory({"sgd", 0.01f}), options);
    const data::Batch batch = testing::random_batch(48, 64, 7);
    for (int step = 1; step <= 4; ++step) pipe.step(batch);
  }
  const JsonValue file = parse_json(read_text(path), path);
  ParsedTrace parsed = read_checked(file);
  EXPECT_EQ(parsed.track_names[10], "host:0 (stage 0) compute stream");
  EXPECT_EQ(parsed.track_names[13], "host:1 (stage 1) compute stream");
  std::set<std::string> caller;
  for (const Span& s : parsed.tracks[1]) caller.insert(s.name);
  EXPECT_EQ(caller, (std::set<std::string>{"step 2", "step 3"}));
  for (int stage = 0; stage < 2; ++stage) {  // each stage's own host thread
    std::multiset<std::string> thread;
    for (const Span& s : parsed.tracks[12 + 3 * stage]) thread.insert(s.name);
    EXPECT_EQ(thread, (std::multiset<std::string>{"run step 2", "optimizer step 2", "run step 3",
                                                  "optimizer step 3"}));
  }
  for (int tid : {10, 13}) {
    std::map<int64_t, std::multiset<std::string>> per_step;
    for (const Span& s : parsed.tracks[tid]) per_step[s.step].insert(s.name);
    const std::multiset<std::string> want = {"input",
                                             "forward micro-batch 0",
                                             "forward micro-batch 1",
                                             "forward micro-batch 2",
                                             "backward micro-batch 0",
                                             "backward micro-batch 1",
                                             "backward micro-batch 2",
                                             "stage gradient sums",
                                             "optimizer"};
    EXPECT_EQ(per_step, (std::map<int64_t, std::multiset<std::string>>{{2, want}, {3, want}}))
        << parsed.track_names[tid];
  }
  fs::remove(path);
}

TEST(StepTrace, BadOptionsAreRefusedUpFront) {
  TraceOptions bad;
  bad.path = temp_trace("bad");
  bad.first_step = 0;
  EXPECT_THROW(check_trace_options(bad), Error);
  bad.first_step = 5;
  bad.last_step = 4;
  try {
    StepTrace trace(bad, 0, {});
    FAIL() << "a reversed range was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    EXPECT_NE(e.message().find("trace steps 5:4"), std::string::npos) << e.message();
  }
  TraceOptions unwritable;
  unwritable.path = "/nonexistent-lockstep-dir/trace.json";
  try {
    StepTrace trace(unwritable, 0, {});
    FAIL() << "a trace into a missing folder was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kIo);
    EXPECT_NE(e.message().find("/nonexistent-lockstep-dir"), std::string::npos) << e.message();
  }
}

TEST(StepTrace, ProcessesOtherThanTheFirstWriteTheirOwnFile) {
  TraceOptions options;
  options.path = temp_trace("processes");
  StepTrace trace(options, 2, {});
  EXPECT_EQ(trace.path(), options.path + ".process-2");
}

}  // namespace
}  // namespace ls
