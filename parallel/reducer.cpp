// Reducer (see parallel/reducer.h).
#include "parallel/reducer.h"

#include "engine/core/error.h"

namespace ls {

// Note [Bucket ready order]
// NCCL (and the host communicator) need every rank to issue the same collectives in the same
// order, or the clique hangs (or, on the host, reports a desync). Gradients can become ready in
// an order that differs from the bucket plan (a parameter used early in forward but also late,
// a layer skipped on one step). So buckets are launched strictly in plan order: bucket i is
// launched only after buckets 0..i-1, even when it was ready first. The plan is identical on every
// replica (same model), hence so is the collective order. Unused parameters never fire the hook;
// finish() launches their buckets last, in order, so every rank still issues every bucket.

Reducer::Reducer(const Tensor& flat_grads, const std::vector<ParameterExtent>& extents,
                 Communicator& comm, Stream& compute, Stream& comm_stream,
                 const BucketOptions& options)
    : flat_grads_(flat_grads), comm_(comm), compute_(compute), comm_stream_(comm_stream) {
  LS_CHECK(flat_grads.defined() && flat_grads.dtype() == DType::kF32,
           "Reducer: the gradient buffer must be a defined f32 tensor");
  LS_CHECK(!extents.empty() && extents.back().offset + extents.back().extent <= flat_grads.numel(),
           "Reducer: the parameter extents run past the gradient buffer (", flat_grads.describe(),
           ")");
  buckets_ = plan_buckets(extents, sizeof(float), options);
  bucket_of_.resize(extents.size());
  DeviceRuntime& runtime = device_runtime(flat_grads.device());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (int p : buckets_[b].parameters) bucket_of_[static_cast<size_t>(p)] = b;
    grads_ready_.push_back(runtime.create_event());
    start_.push_back(runtime.create_event());
    end_.push_back(runtime.create_event());
  }
  backward_end_ = runtime.create_event();
  all_reduced_ = runtime.create_event();
  pending_.resize(buckets_.size());
}

void Reducer::begin() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].parameters.size());
  }
  next_launch_ = 0;
}

void Reducer::on_grad_ready(int index) {
  LS_ASSERT(index >= 0 && static_cast<size_t>(index) < bucket_of_.size(), "gradient of parameter ",
            index, " is in no bucket");
  const size_t bucket = bucket_of_[static_cast<size_t>(index)];
  LS_ASSERT(pending_[bucket] > 0, "gradient of parameter ", index, " reported twice");
  --pending_[bucket];
  launch_ready_buckets();
}

void Reducer::launch_ready_buckets() {
  // See Note [Bucket ready order]: strictly in plan order.
  while (next_launch_ < buckets_.size() && pending_[next_launch_] == 0) launch(next_launch_++);
}

void Reducer::launch(size_t b) {
  const Bucket& bucket = buckets_[b];
  compute_.record(*grads_ready_[b]);
  comm_stream_.wait(*grads_ready_[b]);
  comm_stream_.record(*start_[b]);
  float* grads = flat_grads_.f32() + bucket.offset;
  const auto count = static_cast<size_t>(bucket.count);
  comm_.label_next("bucket " + std::to_string(b));
  comm_.all_reduce(grads, grads, count, DType::kF32, ReduceOp::kSum, comm_stream_);
  comm_stream_.record(*end_[b]);
}

void Reducer::finish() {
  compute_.record(*backward_end_);
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  comm_stream_.record(*all_reduced_);
  compute_.wait(*all_reduced_);
}

Reducer::Timeline Reducer::timeline(const Event& reference) const {
  Timeline t;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    t.bucket_start_ms.push_back(start_[b]->elapsed_ms_since(reference));
    t.bucket_end_ms.push_back(end_[b]->elapsed_ms_since(reference));
  }
  t.backward_end_ms = backward_end_->elapsed_ms_since(reference);
  return t;
}

}  // namespace ls
