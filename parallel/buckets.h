// Gradient buckets as an application sees them (public): how they are sized, what each holds,
// and when each one's all-reduce ran in the last step. The planner is parallel/bucket_plan.h.
#pragma once

#include <cstdint>
#include <vector>

namespace ls {

struct BucketOptions {
  int64_t cap_bytes = 25ll << 20;         // PyTorch DDP's default bucket cap
  int64_t first_bucket_bytes = 1ll << 20;  // small, so communication starts early
};

// A contiguous range of the flat gradient buffer covering whole parameters.
struct Bucket {
  int64_t offset = 0;           // first element in the flat buffer
  int64_t count = 0;            // elements
  std::vector<int> parameters;  // indices into the parameter list, in the order they were added
};

// One replica's last step, in milliseconds from its start.
struct BucketTimeline {
  std::vector<double> bucket_start_ms;  // all-reduce of bucket i began on the comm stream
  std::vector<double> bucket_end_ms;    // ... and ended
  double backward_end_ms = 0;           // the compute stream finished backward
};

}  // namespace ls
