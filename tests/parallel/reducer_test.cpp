// The Reducer on its own (host devices, one thread per rank, gradients written by hand): which
// buckets one launch fuses (BucketOptions::fuse_ready) and what the timeline and the launch
// counts say about it; gradients reduced in bf16 against exact bf16-rounded sums; the host
// communicator running several collectives of different kinds, dtypes and roots in one group,
// as a fused ZeRO-2 launch issues them; bad options refused with a message that says what to do.
#include "parallel/data_parallel/reducer.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include "parallel/data_parallel/bucket_plan.h"
#include "parallel/comm/communicator.h"

namespace ls {
namespace {

constexpr int64_t kParameterSize = 4;  // elements per parameter
constexpr int kParameters = 4;

// kParameters parameters of kParameterSize elements, contiguous.
std::vector<ParameterExtent> extents() {
  std::vector<ParameterExtent> e;
  for (int p = 0; p < kParameters; ++p) e.push_back({p * kParameterSize, kParameterSize});
  return e;
}

// One parameter per bucket: bucket b holds parameter kParameters - 1 - b (planned backwards).
BucketOptions one_parameter_per_bucket(bool fuse, DType dtype = DType::kF32) {
  BucketOptions o;
  o.cap_bytes = o.first_bucket_bytes = kParameterSize * static_cast<int64_t>(sizeof(float));
  o.fuse_ready = fuse;
  o.reduce_dtype = dtype;
  return o;
}

// What one rank saw: its reduced gradients and the timeline of the reduction.
struct RankResult {
  std::vector<float> grads;
  BucketTimeline timeline;
  std::string error;
};

// Runs one reduction on `n` host ranks, each on its own thread with its own compute and comm
// streams: rank r's flat gradients start as grads_of(r), then `hooks` (parameter indices) are
// reported ready in that order, then finish().
std::vector<RankResult> reduce_once(int n, const BucketOptions& options,
                                    const std::function<std::vector<float>(int)>& grads_of,
                                    const std::vector<int>& hooks) {
  std::vector<Device> devices;
  for (int r = 0; r < n; ++r) devices.push_back({DeviceKind::kHost, r});
  auto comms = make_host_communicators(devices, {std::chrono::seconds(10)});
  std::vector<RankResult> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankResult& out = results[static_cast<size_t>(r)];
      try {
        DeviceRuntime& runtime = device_runtime(devices[static_cast<size_t>(r)]);
        auto compute = runtime.create_stream();
        auto comm_stream = runtime.create_stream();
        auto step_start = runtime.create_event();
        const std::vector<float> values = grads_of(r);
        Tensor flat = Tensor::from_host(values, {static_cast<int64_t>(values.size())},
                                        devices[static_cast<size_t>(r)], *compute);
        Reducer reducer(flat, extents(), *comms[static_cast<size_t>(r)], *compute, *comm_stream,
                        options);
        compute->record(*step_start);
        reducer.begin();
        for (int p : hooks) reducer.on_grad_ready(p);
        reducer.finish();
        out.grads = flat.to_host_f32(*compute);
        comm_stream->synchronize();
        out.timeline = reducer.timeline(*step_start);
        EXPECT_EQ(out.timeline.launches, reducer.launches());
        EXPECT_EQ(out.timeline.collectives, reducer.collectives());
      } catch (const Error& e) {
        out.error = e.message();
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::vector<float> rank_values(int r) {
  std::vector<float> v(kParameters * kParameterSize);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * static_cast<float>(i);
  return v;
}

std::vector<float> summed_values(int n) {
  std::vector<float> v(kParameters * kParameterSize);
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < v.size(); ++i) v[i] = ranks * static_cast<float>(i);
  return v;
}

// ---- fusion ----------------------------------------------------------------------------------

TEST(ReducerFusion, EverythingReadyAtFinishIsOneLaunch) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "not fused");
    const auto results = reduce_once(2, one_parameter_per_bucket(fuse), rank_values, {});
    for (const RankResult& r : results) {
      ASSERT_EQ(r.error, "");
      EXPECT_EQ(r.grads, summed_values(2));
      EXPECT_EQ(r.timeline.collectives, kParameters);  // one all-reduce per bucket either way
      EXPECT_EQ(r.timeline.launches, fuse ? 1 : kParameters);
      const std::vector<int> expected = fuse ? std::vector<int>{0, 0, 0, 0}  // one launch
                                             : std::vector<int>{0, 1, 2, 3};
      EXPECT_EQ(r.timeline.bucket_launch, expected);
    }
  }
}

// Bucket b holds parameter 3 - b. Parameter 3 (bucket 0) launches alone; parameter 1's bucket 2
// must wait for bucket 1 in plan order, so parameter 2's hook finds buckets 1 and 2 ready and
// launches them together; finish() launches bucket 3.
TEST(ReducerFusion, BucketsReadyInTheSameCallShareALaunch) {
  const std::vector<int> hooks{3, 1, 2};
  const auto fused = reduce_once(2, one_parameter_per_bucket(true), rank_values, hooks);
  const auto alone = reduce_once(2, one_parameter_per_bucket(false), rank_values, hooks);
  for (int r = 0; r < 2; ++r) {
    const RankResult& f = fused[static_cast<size_t>(r)];
    const RankResult& a = alone[static_cast<size_t>(r)];
    ASSERT_EQ(f.error, "");
    ASSERT_EQ(a.error, "");
    EXPECT_EQ(f.grads, summed_values(2));
    EXPECT_EQ(f.grads, a.grads);
    EXPECT_EQ(f.timeline.bucket_launch, (std::vector<int>{0, 1, 1, 2}));
    EXPECT_EQ(f.timeline.launches, 3);
    EXPECT_EQ(a.timeline.bucket_launch, (std::vector<int>{0, 1, 2, 3}));
    EXPECT_EQ(a.timeline.launches, 4);
    // The buckets tile the comm stream in order, fused or not (see Note [Fused bucket launches]).
    for (const RankResult* result : {&f, &a}) {
      const BucketTimeline& t = result->timeline;
      ASSERT_EQ(t.bucket_start_ms.size(), 4u);
      for (size_t b = 0; b < 4; ++b) {
        EXPECT_LE(t.bucket_start_ms[b], t.bucket_end_ms[b]) << "bucket " << b;
        if (b > 0) {
          EXPECT_GE(t.bucket_start_ms[b], t.bucket_end_ms[b - 1]) << "bucket " << b;
        }
      }
    }
  }
}

TEST(ReducerFusion, HooksInPlanOrderLaunchEveryBucketAlone) {
  const auto results = reduce_once(2, one_parameter_per_bucket(true), rank_values, {3, 2, 1, 0});
  for (const RankResult& r : results) {
    ASSERT_EQ(r.error, "");
    EXPECT_EQ(r.grads, summed_values(2));
    EXPECT_EQ(r.timeline.launches, 4);
    EXPECT_EQ(r.timeline.bucket_launch, (std::vector<int>{0, 1, 2, 3}));
  }
}

// ---- bf16 ------------------------------------------------------------------------------------

// Rank 0 and rank 1's gradients, and their sum as the bf16 reduction gives it: each rounded to
// bf16 (round to nearest, ties to even: 8 significant bits), summed in f32, rounded once more.
const std::vector<float> kRank0{1.0f,
                                1.0f + 0x1p-7f,
                                3.0f,
                                1.0f + 0x1p-9f + 0x1p-10f,
                                256.0f,
                                -3.0f,
                                0.0f,
                                0x1p-7f,
                                1.0f + 0x1p-10f,
                                100.0f,
                                -1.0f,
                                0.5f,
                                2.0f,
                                0.25f,
                                8.0f,
                                -0.125f};
const std::vector<float> kRank1{0x1p-8f, 0x1p-8f, -1.0f, 0x1p-8f, 1.0f, 0.5f,  0.0f, 0x1p-7f,
                                3.0f,    0.75f,   1.0f,  0.25f,   2.0f, 0.25f, 1.0f, -0.125f};
const std::vector<float> kBf16Sum{
    1.0f,       // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to even, 1
    1.015625f,  // (1 + 2^-7) + 2^-8 = 1 + 3 * 2^-8, halfway: ties to even, up to 1 + 2^-6
    2.0f,
    1.0f,    // rank 0's 1.0029296875 is rounded to 1 first; then as the first element
    256.0f,  // 257: halfway between 256 and 258, ties to even
    -2.5f,     0.0f,  0x1p-6f,
    4.0f,    // rank 0's 1 + 2^-10 is rounded to 1 first
    101.0f,  // 100.75: halfway between 100.5 and 101 (spacing 0.5 in [64, 128)): ties to even
    0.0f,      0.75f, 4.0f,    0.5f, 9.0f, -0.25f};

TEST(ReducerBf16, ReducedGradientsAreTheBf16RoundedSums) {
  for (bool fuse : {true, false}) {
    SCOPED_TRACE(fuse ? "fused" : "not fused");
    const auto results = reduce_once(2, one_parameter_per_bucket(fuse, DType::kBF16),
                                     [](int r) { return r == 0 ? kRank0 : kRank1; }, {3, 1, 2, 0});
    for (const RankResult& r : results) {
      ASSERT_EQ(r.error, "");
      EXPECT_EQ(r.grads, kBf16Sum);
      EXPECT_EQ(r.timeline.collectives, kParameters);
    }
  }
}

TEST(ReducerBf16, F32ReductionKeepsWhatBf16RoundsAway) {
  const auto results = reduce_once(2, one_parameter_per_bucket(true),
                                   [](int r) { return r == 0 ? kRank0 : kRank1; }, {});
  ASSERT_EQ(results[0].error, "");
  for (size_t i = 0; i < kRank0.size(); ++i) EXPECT_EQ(results[0].grads[i], kRank0[i] + kRank1[i]);
  EXPECT_NE(results[0].grads, kBf16Sum);
}

// ---- options ---------------------------------------------------------------------------------

TEST(ReducerOptions, ReduceDtypeMustBeF32OrBf16) {
  BucketOptions options;
  options.reduce_dtype = DType::kI32;
  try {
    plan_buckets(extents(), sizeof(float), options);
    FAIL() << "an i32 reduce_dtype was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("reduce_dtype is i32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("DType::kBF16"), std::string::npos) << e.message();
  }
}

// ---- the host communicator's groups ------------------------------------------------------------

// A fused ZeRO-2 launch puts reduces to several roots in one group, and a fused bf16 launch
// several bf16 all-reduces: the host communicator runs each call of a group in order, exactly
// as outside one, nested groups included.
TEST(HostCommunicatorGroups, MixedCollectivesInOneNestedGroupGiveExactResults) {
  const std::vector<Device> devices{{DeviceKind::kHost, 0}, {DeviceKind::kHost, 1}};
  auto comms = make_host_communicators(devices, {std::chrono::seconds(10)});
  std::vector<std::vector<float>> f32(2), reduced(2, std::vector<float>(4, -7.0f));
  std::vector<std::vector<uint16_t>> bf16(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      const auto ur = static_cast<size_t>(r);
      try {
        auto stream = device_runtime(devices[ur]).create_stream();
        f32[ur] = {1.0f * static_cast<float>(r + 1), 2, 3, 4, 5, 6, 7, 8};
        bf16[ur] = {0x3f80, 0x4000};  // bf16 1.0 and 2.0
        Communicator& comm = *comms[ur];
        comm.group_start();
        comm.all_reduce(bf16[ur].data(), bf16[ur].data(), 2, DType::kBF16, ReduceOp::kSum, *stream);
        comm.group_start();  // nested: still one group
        // Pieces of one buffer reduced to different owners, in place off the owner.
        float* owned = reduced[ur].data();
        comm.reduce(f32[ur].data(), r == 0 ? owned : f32[ur].data(), 4, DType::kF32, ReduceOp::kSum,
                    0, *stream);
        comm.reduce(f32[ur].data() + 4, r == 1 ? owned : f32[ur].data() + 4, 4, DType::kF32,
                    ReduceOp::kSum, 1, *stream);
        comm.group_end();
        comm.all_reduce(f32[ur].data() + 4, f32[ur].data() + 4, 4, DType::kF32, ReduceOp::kMax,
                        *stream);
        comm.group_end();
        stream->synchronize();
      } catch (const Error& e) {
        errors[ur] = e.message();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(bf16[r], (std::vector<uint16_t>{0x4000, 0x4080})) << "rank " << r;  // 2.0, 4.0
    EXPECT_EQ(std::vector<float>(f32[r].begin() + 4, f32[r].end()),
              (std::vector<float>{5, 6, 7, 8}))
        << "max of equal values, rank " << r;
  }
  EXPECT_EQ(reduced[0], (std::vector<float>{3, 4, 6, 8}));      // rank 0 owns elements 0..3
  EXPECT_EQ(reduced[1], (std::vector<float>{10, 12, 14, 16}));  // rank 1 owns elements 4..7
}

}  // namespace
}  // namespace ls
