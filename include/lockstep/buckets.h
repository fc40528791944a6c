// Gradient buckets as an application sees them (public): how they are sized and reduced, what
// each holds, and when each one's all-reduce ran in the last step (docs/architecture.md, "Data
// parallel", says how they are planned and overlapped with backward).
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/dtype.h>

namespace ls {

struct BucketOptions {
  int64_t cap_bytes = 25ll << 20;          // PyTorch DDP's default bucket cap (f32 gradient bytes)
  int64_t first_bucket_bytes = 1ll << 20;  // small, so communication starts early
  // Buckets found ready together (a bucket that waited for an earlier one in plan order, and
  // whatever finish() launches at the end of backward) go out in one group call: one NCCL
  // launch instead of one per bucket, which saves the launch latency of many small buckets.
  // Same collectives, same order, same results (bitwise); false launches every bucket alone.
  bool fuse_ready = true;
  // The dtype gradients travel in: kF32 (default) or kBF16, which moves half the bytes: each
  // bucket is rounded to bf16 on the comm stream, summed and widened back into the f32
  // gradients, so every replica still holds bitwise equal gradients. The host communicator sums
  // in f32 and rounds once (each result the bf16 rounding of the sum of the bf16-rounded
  // gradients); NCCL's ring may round at every hop. Costs a persistent bf16
  // copy of the gradients (half their size). Not with sharded gradients (ShardMode::kGradients).
  DType reduce_dtype = DType::kF32;
};

// A contiguous range of the flat gradient buffer covering whole parameters.
struct Bucket {
  int64_t offset = 0;           // first element in the flat buffer
  int64_t count = 0;            // elements
  std::vector<int> parameters;  // indices into the parameter list, in the order they were added
};

// One replica's last step, in milliseconds from its start. A launch fused from several buckets
// (BucketOptions::fuse_ready) is timed as a whole: its first bucket spans it, and the later ones
// show as empty at its end, so the buckets still tile the comm stream in order without counting
// any time twice; bucket_launch tells which buckets shared a launch.
struct BucketTimeline {
  std::vector<double> bucket_start_ms;  // all-reduce of bucket i began on the comm stream
  std::vector<double> bucket_end_ms;    // ... and ended
  std::vector<int> bucket_launch;       // the launch (0, 1, ...) of the step that carried bucket i
  double backward_end_ms = 0;           // the compute stream finished backward
  int launches = 0;     // group calls and ungrouped collectives: what NCCL launches, per step
  int collectives = 0;  // collectives issued for the gradients (ZeRO-2: one per owner piece)
};

}  // namespace ls
