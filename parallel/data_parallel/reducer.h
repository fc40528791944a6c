// Reducer: sums gradients across replicas, bucket by bucket, overlapped with backward.
// Two ways: all-reduce views of the flat gradient buffer in place (DDP, ZeRO-1), or, with
// sharded gradients (ZeRO-2), reduce each bucket's pieces to the replicas that own them, from
// short-lived staging buffers (Note [Sharded gradients] in reducer.cpp).
//
// Buckets (parallel/data_parallel/bucket_plan.h) are views of the flat gradient buffer the Reducer
// is given, with the parameters' extents in it. During the last backward of a step, the tape's
// grad-ready hook calls on_grad_ready(parameter index); when every parameter of the next bucket is
// ready, the reducer records an event on the compute stream, makes the comm stream wait on it and
// enqueues the bucket's in-place all-reduce there: no host sync, so the all-reduce of early buckets
// runs while backward computes the rest. finish() launches what is left and makes the compute
// stream wait for the comm stream, so the optimizer sees summed gradients. Every replica launches
// buckets in the same order (Note [Bucket ready order]). Buckets found ready in the same call go
// out in one group call when BucketOptions::fuse_ready (Note [Fused bucket launches]); with
// reduce_dtype bf16 each bucket travels as a bf16 copy (Note [Gradients reduced in bf16]).
// Timeline events (bucket start/end on the comm stream, backward end on compute) let callers
// measure overlap and exposed communication after the step has synchronized.
// Thread-safety: used by its replica's thread only.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/runtime.h"
#include <lockstep/tensor.h>
#include "parallel/data_parallel/bucket_plan.h"
#include "parallel/comm/communicator.h"
#include "parallel/observability/flight_recorder.h"

namespace ls {

// ZeRO-2's layout: the flat gradient layout is cut into size() equal ranges; replica r owns
// range r, where its reduced gradients land.
struct GradientShard {
  int64_t flat_size = 0;   // elements of the flat layout, padding included (size() * shard_size)
  int64_t shard_size = 0;  // elements per range
  Tensor owned;            // f32 [shard_size]: this replica's range of the summed gradients
};

class Reducer {
 public:
  // `flat_grads` (f32) holds every parameter's gradient at `extents` (registration order,
  // contiguous); buckets all-reduce views of it in place. It must outlive the Reducer.
  Reducer(const Tensor& flat_grads, const std::vector<ParameterExtent>& extents,
          Communicator& comm, Stream& compute, Stream& comm_stream,
          const BucketOptions& options);
  // Sharded gradients: no flat buffer; gradients go to staging buffers that gradient_storage()
  // hands out, and their sums to the owners' `shard.owned` (which must outlive the Reducer).
  Reducer(const GradientShard& shard, const std::vector<ParameterExtent>& extents,
          Communicator& comm, Stream& compute, Stream& comm_stream,
          const BucketOptions& options);

  // Starts a reduction's bookkeeping; call before the backward whose hook feeds it. Sharded:
  // `accumulate` adds this reduction's sums to the owned gradients instead of writing them (the
  // micro-batches after a step's first).
  void begin(bool accumulate = false);
  // Sharded: zeroed storage for parameter `index`'s gradient (shaped `shape`), a view of its
  // bucket's staging buffer, allocated on the bucket's first request since begin(); the tape's
  // GradStorage. Valid until the bucket has been reduced.
  Tensor gradient_storage(int index, const Shape& shape);
  // The gradient of parameter `index` (into extents) is final for this step.
  void on_grad_ready(int index);
  // Marks the end of backward on the compute stream, launches every bucket not launched yet (in
  // order) and makes the compute stream wait for the last all-reduce (sharded: and releases
  // every staging buffer).
  void finish();
  bool sharded() const { return shard_.owned.defined(); }

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // The last step's group calls plus ungrouped collectives (what NCCL launches), and its
  // collectives; both summed over a step's micro-batches (ZeRO-2 reduces after each).
  int launches() const { return launches_; }
  int collectives() const { return collectives_; }

  // After the step has synchronized: milliseconds from `reference` (an event the caller recorded
  // on the compute stream, e.g. at the start of the step) to each point of the last step.
  using Timeline = BucketTimeline;
  Timeline timeline(const Event& reference) const;
  // i32 [4 * buckets]: per bucket, the device's clock (two words each) when the launch carrying
  // it started and ended on the comm stream in the last reduction (stamp_device_clock), complete
  // once the compute stream has passed finish(); in graphs too. Buckets launched together share
  // their start and end.
  const Tensor& launch_marks() const { return launch_marks_; }

 private:
  void make_events();
  void launch_ready_buckets();
  void launch_through(size_t end);        // buckets [next_launch_, end), fused or one by one
  void launch(size_t first, size_t end);  // buckets [first, end) in one launch
  void all_reduce(size_t first, size_t end);
  void reduce_to_owners(size_t bucket);
  void add_owned_sums(size_t bucket);  // sharded, accumulating: after the group has ended
  Tensor& staging(size_t bucket);  // allocated and zeroed on first use since begin()
  void release_staging(size_t bucket);

  Tensor flat_grads_;
  GradientShard shard_;                   // sharded only
  std::vector<ParameterExtent> extents_;  // sharded only
  std::vector<Tensor> staging_;           // sharded only: per bucket, while it is live
  size_t next_release_ = 0;               // sharded only: staging below it is released
  bool accumulate_ = false;
  bool fuse_ready_ = true;
  DType reduce_dtype_ = DType::kF32;
  std::vector<Tensor> reduce_buffers_;  // bf16 only: per bucket, persistent
  Communicator& comm_;
  Stream& compute_;
  Stream& comm_stream_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<int> pending_;  // per bucket: parameters whose gradient is not final yet
  size_t next_launch_ = 0;
  int launches_ = 0, collectives_ = 0;
  std::vector<int> launch_of_;  // per bucket: which launch of the last reduction carried it
  std::vector<std::unique_ptr<Event>> grads_ready_;  // per bucket, on compute
  std::vector<std::unique_ptr<Event>> start_, end_;  // per bucket, on comm
  std::unique_ptr<Event> backward_end_;
  std::unique_ptr<Event> all_reduced_;
  Tensor launch_marks_;
};

}  // namespace ls
