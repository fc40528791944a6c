// Reducer: sums gradients across replicas, bucket by bucket, overlapped with backward.
//
// Buckets (parallel/bucket_plan.h) are views of the flat gradient buffer. During the last
// backward of a step, the tape's grad-ready hook calls on_grad_ready(); when every parameter of
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
#include <unordered_map>
#include <vector>

#include "engine/model/nn/parameter_store.h"
#include "engine/core/runtime.h"
#include "parallel/bucket_plan.h"
#include "parallel/communicator.h"
#include "parallel/fault_injection.h"
#include "parallel/flight_recorder.h"

namespace ls {

class Reducer {
 public:
  Reducer(nn::ParameterStore& store, RecordingCommunicator& comm, Stream& compute,
          Stream& comm_stream, const BucketOptions& options);

  // Starts a step's reduction bookkeeping; call before the backward whose hook feeds it.
  // `fault` (tests only): kWrongCount shortens bucket 0's all-reduce by one element.
  void begin(FaultInjection::Kind fault = FaultInjection::Kind::kNone);
  void on_grad_ready(Parameter& parameter);
  // Marks the end of backward on the compute stream, launches every bucket not launched yet (in
  // order) and makes the compute stream wait for the last all-reduce.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

  // After the step has synchronized: milliseconds from `reference` (an event the caller recorded
  // on the compute stream, e.g. at the start of the step) to each point of the last step.
  struct Timeline {
    std::vector<double> bucket_start_ms;  // all-reduce of bucket i began on the comm stream
    std::vector<double> bucket_end_ms;    // ... and ended
    double backward_end_ms = 0;           // the compute stream finished backward
  };
  Timeline timeline(const Event& reference) const;

 private:
  void launch_ready_buckets();
  void launch(size_t bucket);

  nn::ParameterStore& store_;
  RecordingCommunicator& comm_;
  FaultInjection::Kind fault_ = FaultInjection::Kind::kNone;
  Stream& compute_;
  Stream& comm_stream_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const Parameter*, size_t> bucket_of_;
  std::vector<int> pending_;  // per bucket: parameters whose gradient is not final yet
  size_t next_launch_ = 0;
  std::vector<std::unique_ptr<Event>> grads_ready_;  // per bucket, on compute
  std::vector<std::unique_ptr<Event>> start_, end_;  // per bucket, on comm
  std::unique_ptr<Event> backward_end_;
  std::unique_ptr<Event> all_reduced_;
};

}  // namespace ls
