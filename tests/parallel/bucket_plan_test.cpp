// The bucket planner: caps, the small first bucket, oversized parameters, order and coverage.
#include "parallel/data_parallel/bucket_plan.h"

#include <gtest/gtest.h>

#include <lockstep/error.h>

namespace ls {
namespace {

std::vector<ParameterExtent> extents_of(const std::vector<int64_t>& sizes) {
  std::vector<ParameterExtent> out;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    out.push_back({offset, s});
    offset += s;
  }
  return out;
}

TEST(BucketPlan, ReverseOrderWithSmallFirstBucket) {
  // 4-byte elements; first bucket 400 B = 100 elements, then 1000 B = 250 elements.
  const auto buckets = plan_buckets(extents_of({100, 50, 60, 70, 200}), 4, {1000, 400});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].parameters, (std::vector<int>{4}));        // 200 > 100: alone
  EXPECT_EQ(buckets[1].parameters, (std::vector<int>{3, 2, 1}));  // 70+60+50 = 180 <= 250
  EXPECT_EQ(buckets[2].parameters, (std::vector<int>{0}));        // +100 would be 280
  EXPECT_EQ(buckets[0].offset, 280);
  EXPECT_EQ(buckets[0].count, 200);
  EXPECT_EQ(buckets[1].offset, 100);
  EXPECT_EQ(buckets[1].count, 180);
  EXPECT_EQ(buckets[2].offset, 0);
  EXPECT_EQ(buckets[2].count, 100);
}

TEST(BucketPlan, BucketsTileTheBufferWithoutGapsOrOverlap) {
  const auto extents = extents_of({64, 128, 4096, 64, 1 << 20, 256, 64});
  const auto buckets = plan_buckets(extents, 4, {1 << 16, 1 << 12});
  int64_t end = extents.back().offset + extents.back().extent;
  for (const Bucket& b : buckets) {  // walking backwards from the end of the buffer
    EXPECT_EQ(b.offset + b.count, end);
    end = b.offset;
  }
  EXPECT_EQ(end, 0);
}

TEST(BucketPlan, ParameterLargerThanCapGetsItsOwnBucket) {
  const auto buckets = plan_buckets(extents_of({10, 5000, 10}), 4, {400, 400});
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[1].parameters, (std::vector<int>{1}));
  EXPECT_EQ(buckets[1].count, 5000);
}

TEST(BucketPlan, EverythingFitsInOneBucket) {
  const auto buckets = plan_buckets(extents_of({10, 20, 30}), 4, {25 << 20, 1 << 20});
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].parameters, (std::vector<int>{2, 1, 0}));
  EXPECT_EQ(buckets[0].count, 60);
}

TEST(BucketPlan, DefaultsMatchDdp) {
  const BucketOptions defaults;
  EXPECT_EQ(defaults.cap_bytes, 25 << 20);
  EXPECT_EQ(defaults.first_bucket_bytes, 1 << 20);
  // 784-1024-1024-10 MLP: 10-wide head and bias fit the first bucket; the 1024x1024 layer
  // (4 MiB) goes into the second; every parameter is in exactly one bucket.
  const auto buckets =
      plan_buckets(extents_of({784 * 1024, 1024, 1024 * 1024, 1024, 10 * 1024, 64}), 4, defaults);
  std::vector<int> seen;
  for (const Bucket& b : buckets) seen.insert(seen.end(), b.parameters.begin(), b.parameters.end());
  EXPECT_EQ(seen, (std::vector<int>{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(buckets[0].parameters, (std::vector<int>{5, 4, 3}));
}

TEST(BucketPlan, BadInputIsAnError) {
  EXPECT_THROW(plan_buckets({}, 4, {}), Error);
  EXPECT_THROW(plan_buckets(extents_of({10}), 4, {0, 100}), Error);
  EXPECT_THROW(plan_buckets({{0, 10}, {20, 10}}, 4, {}), Error);  // gap
  EXPECT_THROW(plan_buckets({{0, 0}}, 4, {}), Error);             // empty
}

}  // namespace
}  // namespace ls
