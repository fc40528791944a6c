// The defects that would turn a first multi-GPU run into a hang, as far as host devices can show
// them (docs/gpu.md, "Hang safety"): a collective stuck inside a fused launch is named by the
// watchdog within its timeout (its end is recorded at the group's end, not before the launch);
// a failure while every replica holds a live step graph reaches the caller with its own error,
// quickly, with nothing blocked (streams aborted first, communicator aborts that never wait,
// graphs destroyed before their communicator); graphs are off by default only for several GPUs
// of one process; a host group enqueues its collectives at its end, as NCCL launches them.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "engine/core/runtime.h"
#include "parallel/comm/communicator.h"
#include <lockstep/data_parallel.h>
#include "parallel/data_parallel/engine_hooks.h"
#include "parallel/random_batch.h"
#include "parallel/training_helpers.h"

namespace ls {
namespace {

using Clock = std::chrono::steady_clock;
using testing::hosts;
using testing::random_batch;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "'" << part << "' not in: " << text;
}

// On `rank` at its `step`-th fused launch (a group of several collectives), puts a stall of
// `stall` on the stream ahead of the group's first collective: that rank's part arrives late,
// and its peers wait inside the launch.
class StallInFusedLaunch final : public CommunicatorDecorator {
 public:
  StallInFusedLaunch(std::unique_ptr<Communicator> inner, int rank, int launch,
                     std::chrono::milliseconds stall)
      : CommunicatorDecorator(std::move(inner)), stalling_rank_(rank), launch_(launch),
        stall_(stall) {}

  void group_start() override {
    if (depth_++ == 0) ++launches_;
    CommunicatorDecorator::group_start();
  }
  void group_end() override {
    --depth_;
    CommunicatorDecorator::group_end();
  }

 protected:
  void issue(CollectiveDesc desc, Stream& stream) override {
    if (depth_ > 0 && rank() == stalling_rank_ && launches_ == launch_ && !stalled_) {
      stalled_ = true;
      host_enqueue(stream, [stall = stall_] { std::this_thread::sleep_for(stall); });
    }
    CommunicatorDecorator::issue(desc, stream);
  }

 private:
  int stalling_rank_, launch_;
  std::chrono::milliseconds stall_;
  int depth_ = 0, launches_ = 0;
  bool stalled_ = false;
};

DataParallelOptions fused_small_buckets() {
  DataParallelOptions o;
  o.buckets.cap_bytes = o.buckets.first_bucket_bytes = 256;  // about one parameter per bucket
  o.buckets.fuse_ready = true;
  o.timeout = std::chrono::milliseconds(500);
  o.graphs = false;  // eager steps: the stall is injected at issue time
  return o;
}

// Before the fix the end event of a collective in a group stood before the collective on the
// stream: the waiting replica read "completed", the watchdog saw nothing, and the step simply
// finished late when the stall ended (or, stuck for good, surfaced at the 3.5 s outcome deadline).
TEST(HangSafety, ACollectiveStuckInAFusedLaunchIsNamedByTheWatchdog) {
  EngineHooks hooks;
  hooks.wrap_communicator = [](std::unique_ptr<Communicator> inner, int) {
    return std::unique_ptr<Communicator>(
        new StallInFusedLaunch(std::move(inner), 1, 3, std::chrono::milliseconds(2500)));
  };
  const Clock::time_point start = Clock::now();
  std::string message;
  {
    const std::unique_ptr<DataParallel> stalled = make_data_parallel(
        hosts(2), mlp_factory({20, 32, 16, 10}), testing::momentum_sgd(), fused_small_buckets(),
        hooks);
    DataParallel& dp = *stalled;
    try {
      for (int s = 0; s < 3; ++s) dp.step(random_batch(16, 20, 40 + static_cast<uint32_t>(s)));
    } catch (const Error& e) {
      message = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kTimeout) << message;
    }
  }
  ASSERT_FALSE(message.empty()) << "the stalled fused launch went unnoticed";
  expect_contains(message, "collective timeout (0.5 s)");
  expect_contains(message, "replica 0 (host:0) waits in all_reduce #");
  expect_contains(message, "bucket");
  // The watchdog acts at 0.5 s; tearing down waits for the stall (2.5 s) to leave the stream.
  EXPECT_LT(seconds_since(start), 4.5) << message;
}

// A label outside the classes fails the loss on one replica's device in a step that runs as a
// graph; every replica holds its graph (and, on CUDA, NCCL's references through it) when the
// failure aborts them all.
TEST(HangSafety, AFailureWhileEveryReplicaHoldsAGraphKeepsItsErrorAndBlocksNothing) {
  DataParallelOptions options;
  options.timeout = std::chrono::seconds(20);  // a rescue by the watchdog would show
  options.graphs = true;
  const Clock::time_point start = Clock::now();
  std::string message;
  int64_t launches = 0;
  {
    DataParallel dp(hosts(2), mlp_factory({20, 32, 10}), testing::momentum_sgd(), options);
    for (int s = 0; s < 4; ++s) dp.step(random_batch(16, 20, 60 + static_cast<uint32_t>(s)));
    launches = dp.graph_launches();
    data::Batch bad = random_batch(16, 20, 70);
    bad.labels.back() = 999;  // replica 1's rows are the second half
    try {
      dp.step(bad);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_THROW(dp.step(random_batch(16, 20, 71)), Error) << "usable after a failure";
  }  // destroyed here: graphs first, then communicators; nothing may wait
  EXPECT_GE(launches, 1) << "the failing step must come after graph launches";
  ASSERT_FALSE(message.empty()) << "the bad label was not reported";
  expect_contains(message, "replica 1 on host:1 failed in step (step 5");
  expect_contains(message, "999");
  EXPECT_LT(seconds_since(start), 5.0) << message;
}

TEST(HangSafety, GraphsAreOffByDefaultOnlyForSeveralGpusOfOneProcess) {
  EXPECT_TRUE(graphs_by_default(hosts(4)));
  const Device cuda0{DeviceKind::kCuda, 0}, cuda1{DeviceKind::kCuda, 1};
  EXPECT_TRUE(graphs_by_default({cuda0}));
  EXPECT_TRUE(graphs_by_default({cuda1}));
  EXPECT_FALSE(graphs_by_default({cuda0, cuda1}));
  DataParallel dp(hosts(2), mlp_factory({4, 4}), testing::momentum_sgd());
  EXPECT_TRUE(dp.graphs());
  DataParallelOptions off;
  off.graphs = false;
  DataParallel eager(hosts(2), mlp_factory({4, 4}), testing::momentum_sgd(), off);
  EXPECT_FALSE(eager.graphs());
}

// NCCL launches a group's collectives at its end; the host communicator enqueues them there too,
// so work put on the stream inside the group runs before them on both backends.
TEST(HangSafety, AHostGroupEnqueuesItsCollectivesAtItsEnd) {
  auto comms = make_communicators(hosts(2), {});
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<Tensor> values;
  for (int r = 0; r < 2; ++r) {
    streams.push_back(device_runtime(Device{DeviceKind::kHost, r}).create_stream());
    values.push_back(Tensor::from_host(std::vector<float>{1.0f}, {1}, Device{DeviceKind::kHost, r},
                                       *streams.back()));
  }
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      Communicator& comm = *comms[static_cast<size_t>(r)];
      Stream& stream = *streams[static_cast<size_t>(r)];
      float* v = static_cast<float*>(values[static_cast<size_t>(r)].data());
      comm.group_start();
      comm.all_reduce(v, v, 1, DType::kF32, ReduceOp::kSum, stream);
      host_enqueue(stream, [v] { *v = 10.0f; });  // inside the group: runs before the sum
      comm.group_end();
      stream.synchronize();
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(values[static_cast<size_t>(r)].to_host_f32(*streams[static_cast<size_t>(r)]),
              std::vector<float>{20.0f});
  }
}

}  // namespace
}  // namespace ls
