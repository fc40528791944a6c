// Reducer: sums gradients across replicas, bucket by bucket, overlapped with backward.
//
// Buckets (parallel/bucket_plan.h) are views of the flat gradient buffer the Reducer is given,
// with the parameters' extents in it. During the last backward of a step, the tape's grad-ready
// hook calls on_grad_ready(parameter index); when every parameter of
// the next bucket is ready, the reducer records an event on the compute stream, makes the comm
// stream wait on it and enqueues the bucket's in-place all-reduce there: no host sync, so the
// all-reduce of early buckets runs while backward computes the rest. finish() launches what is
// left and makes the compute stream wait for the comm stream, so the optimizer sees summed
// gradients. Every replica launches buckets in the same order (Note [Bucket ready order]).
// Timeline events (bucket start/end on the comm stream, backward end on compute) let callers
// measure overlap and exposed communication after the step has synchronized.
// Thread-safety: used by its replica's thread only.
#pragma once

#include <memory>
#include <vector>

#include "engine/core/runtime.h"
#include "engine/core/tensor.h"
#include "parallel/bucket_plan.h"
#include "parallel/communicator.h"
#include "parallel/flight_recorder.h"

namespace ls {

class Reducer {
 public:
  // `flat_grads` (f32) holds every parameter's gradient at `extents` (registration order,
  // contiguous); buckets all-reduce views of it in place. It must outlive the Reducer.
  Reducer(const Tensor& flat_grads, const std::vector<ParameterExtent>& extents,
          Communicator& comm, Stream& compute, Stream& comm_stream,
          const BucketOptions& options);

  // Starts a step's reduction bookkeeping; call before the backward whose hook feeds it.
  void begin();
  // The gradient of parameter `index` (into extents) is final for this step.
  void on_grad_ready(int index);
  // Marks the end of backward on the compute stream, launches every bucket not launched yet (in
  // order) and makes the compute stream wait for the last all-reduce.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

  // After the step has synchronized: milliseconds from `reference` (an event the caller recorded
  // on the compute stream, e.g. at the start of the step) to each point of the last step.
  using Timeline = BucketTimeline;
  Timeline timeline(const Event& reference) const;

 private:
  void launch_ready_buckets();
  void launch(size_t bucket);

  Tensor flat_grads_;
  Communicator& comm_;
  Stream& compute_;
  Stream& comm_stream_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;  // per parameter
  std::vector<int> pending_;  // per bucket: parameters whose gradient is not final yet
  size_t next_launch_ = 0;
  std::vector<std::unique_ptr<Event>> grads_ready_;  // per bucket, on compute
  std::vector<std::unique_ptr<Event>> start_, end_;  // per bucket, on comm
  std::unique_ptr<Event> backward_end_;
  std::unique_ptr<Event> all_reduced_;
};

}  // namespace ls
