// The one collective descriptor (parallel/comm/collective.h): describe()'s one format,
// same_collective() (the fingerprint: everything but buffers and label), the desync checker that
// compares descriptors across replicas, and the one device-list check every backend runs.
#include "parallel/comm/collective.h"

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <lockstep/error.h>
#include "parallel/comm/communicator.h"
#include "parallel/observability/flight_recorder.h"

namespace ls {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(CollectiveDesc, DescribeHasOneFormat) {
  CollectiveDesc all_reduce = CollectiveDesc::all_reduce(nullptr, nullptr, 262144, DType::kF32,
                                                         ReduceOp::kSum);
  all_reduce.seq = 5;
  all_reduce.label = "bucket 3";
  EXPECT_EQ(describe(all_reduce), "all_reduce #5 (bucket 3, 1.0 MiB) [f32, count=262144, sum]");
  EXPECT_EQ(describe(CollectiveDesc::reduce_scatter(nullptr, nullptr, 2048, DType::kBF16,
                                                    ReduceOp::kAvg)),
            "reduce_scatter (4.0 KiB) [bf16, recv_count=2048, avg]");
  EXPECT_EQ(describe(CollectiveDesc::all_gather(nullptr, nullptr, 3, DType::kF32)),
            "all_gather (12 B) [f32, send_count=3]");
  EXPECT_EQ(describe(CollectiveDesc::broadcast(nullptr, nullptr, 16, DType::kF32, 1)),
            "broadcast (64 B) [f32, count=16, root=1]");
  EXPECT_EQ(describe(CollectiveDesc::reduce(nullptr, nullptr, 64, DType::kF32, ReduceOp::kSum, 1)),
            "reduce (256 B) [f32, count=64, sum, root=1]");
}

TEST(CollectiveDesc, SameCollectiveIgnoresBuffersAndLabelOnly) {
  float a = 0, b = 0;
  CollectiveDesc x = CollectiveDesc::all_reduce(&a, &a, 8, DType::kF32, ReduceOp::kSum);
  CollectiveDesc y = CollectiveDesc::all_reduce(&b, &b, 8, DType::kF32, ReduceOp::kSum);
  y.label = "loss";
  EXPECT_TRUE(same_collective(x, y));
  for (auto change : std::vector<std::function<void(CollectiveDesc&)>>{
           [](CollectiveDesc& d) { d.kind = CollectiveKind::kBroadcast; },
           [](CollectiveDesc& d) { d.dtype = DType::kBF16; },
           [](CollectiveDesc& d) { d.count = 7; },
           [](CollectiveDesc& d) { d.op = ReduceOp::kMax; },
           [](CollectiveDesc& d) { d.root = 1; },
           [](CollectiveDesc& d) { d.seq = 2; }}) {
    CollectiveDesc z = y;
    change(z);
    EXPECT_FALSE(same_collective(x, z)) << describe(z);
  }
}

TEST(CollectiveDesc, DesyncCheckerThrowsADesyncNamingBothReplicas) {
  DesyncChecker checker(2);
  CollectiveDesc mine = CollectiveDesc::all_reduce(nullptr, nullptr, 1000, DType::kF32,
                                                   ReduceOp::kSum);
  mine.seq = 1;
  mine.label = "bucket 0";
  checker.check(0, mine);
  checker.check(1, mine);  // #1 agrees
  mine.seq = 2;
  checker.check(0, mine);
  CollectiveDesc theirs = mine;
  theirs.count = 999;
  try {
    checker.check(1, theirs);
    ADD_FAILURE() << "no desync";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kDesync);
    EXPECT_TRUE(
        contains(e.message(),
                 "collective desync at #2: replica 0 issued all_reduce #2 (bucket 0, 3.9 "
                 "KiB) [f32, count=1000, sum] but replica 1 issued all_reduce #2 (bucket 0, "
                 "3.9 KiB) [f32, count=999, sum]"))
        << e.message();
  }
}

TEST(CollectiveDesc, OneDeviceListCheckForEveryBackend) {
  const CommunicatorOptions options{10s};
  const Device h0{DeviceKind::kHost, 0}, h1{DeviceKind::kHost, 1}, c0{DeviceKind::kCuda, 0};
  EXPECT_NO_THROW(check_clique_devices({h0, h1}, options, "test"));
  EXPECT_NO_THROW(check_clique_devices({c0}, options, "test", DeviceKind::kCuda));
  const std::vector<std::pair<std::function<void()>, std::string>> bad_lists = {
      {[&] { check_clique_devices({}, options, "test"); }, "test: no devices"},
      {[&] { check_clique_devices({h0, c0}, options, "test"); }, "cannot mix host:0 and cuda:0"},
      {[&] { check_clique_devices({h0, h0}, options, "test"); }, "host:0 appears twice"},
      {[&] { check_clique_devices({h0}, options, "test", DeviceKind::kCuda); },
       "host:0 is not a CUDA device"},
      {[&] { check_clique_devices({{DeviceKind::kCuda, -1}}, options, "test"); },
       "cuda:-1 is not a valid device index"},
      {[&] { check_clique_devices({h0}, CommunicatorOptions{0ms}, "test"); },
       "timeout must be positive"}};
  for (const auto& [check, part] : bad_lists) {
    try {
      check();
      ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUsage);
      EXPECT_TRUE(contains(e.message(), part)) << e.message();
    }
  }
}

}  // namespace
}  // namespace ls
