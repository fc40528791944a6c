// The bucket planner: a pure function from parameter extents and caps to gradient buckets.
//
// A bucket is a contiguous range of the flat gradient buffer covering whole parameters, so its
// all-reduce works on a view in place (no packing). Buckets are formed walking the parameters in
// reverse registration order — roughly the order backward finishes their gradients — so the
// first bucket can be reduced while backward is still producing the others. The first bucket is
// kept small (default 1 MiB) so communication starts early; the rest are capped (default 25 MiB,
// PyTorch DDP's defaults). A parameter larger than the cap gets a bucket of its own. The caps
// count f32 gradient bytes whatever BucketOptions::reduce_dtype is (the plan, and so the
// collective order, does not depend on it; bf16 buckets move half of that).
// Bucket i is reduced i-th on every replica; see Note [Bucket ready order] in reducer.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <lockstep/buckets.h>

namespace ls {

// A parameter's place in the flat buffer: [offset, offset + extent) elements, where the extent
// includes the alignment padding up to the next parameter.
struct ParameterExtent {
  int64_t offset = 0;
  int64_t extent = 0;
};

// ZeRO-2 (parallel/data_parallel/reducer.cpp, Note [Sharded gradients]) keeps this many buckets'
// staging at once when backward finishes gradients in bucket order: the two launched last (released
// when the next one launches) and the one filling; plus any bucket backward touched early but
// launches late (a tied parameter's), and more when gradients finish out of bucket order.
inline constexpr size_t kZero2StagingBuckets = 3;

// `extents` must be in registration order, ascending, contiguous and non-empty. Also checks the
// options that are not about sizes (reduce_dtype), so bad options fail before any work.
std::vector<Bucket> plan_buckets(const std::vector<ParameterExtent>& extents,
                                 int64_t element_bytes, const BucketOptions& options);

}  // namespace ls
