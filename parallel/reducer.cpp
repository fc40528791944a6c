// Reducer (see parallel/reducer.h).
#include "parallel/reducer.h"

#include <algorithm>

#include "engine/core/error.h"
#include "ops/elementwise.h"

namespace ls {

// Note [Bucket ready order]
// NCCL (and the host communicator) need every rank to issue the same collectives in the same
// order, or the clique hangs (or, on the host, reports a desync). Gradients can become ready in
// an order that differs from the bucket plan (a parameter used early in forward but also late,
// a layer skipped on one step). So buckets are launched strictly in plan order: bucket i is
// launched only after buckets 0..i-1, even when it was ready first. The plan is identical on every
// replica (same model), hence so is the collective order. Unused parameters never fire the hook;
// finish() launches their buckets last, in order, so every rank still issues every bucket.

// Note [Sharded gradients]
// ZeRO-2 keeps no flat gradient buffer. The flat layout is cut into size() equal ranges and
// replica r keeps only the sums of range r (GradientShard::owned, 1/N of the gradients). During
// backward a bucket's gradients live in a staging buffer from the caching allocator, zeroed and
// taken when backward first reaches one of the bucket's parameters (the tape's GradStorage).
// Launching a bucket cuts its range at the shard boundaries and reduces each piece to the
// replica that owns it (one reduce per owner, in one group), straight into that owner's
// `owned` (accumulating micro-batches: in place in the staging buffer, then added to `owned` on
// the comm stream). On the host communicator a reduce sums in rank order like the all-reduce,
// so ZeRO-2 with one micro-batch is bitwise the unsharded run there (with more, each micro-batch
// is reduced and the sums are taken in another order); NCCL may order a reduce's sum differently
// from its all-reduce's (last-bit differences).
// A staging buffer is read by the comm stream, but the allocator hands memory out again in
// compute-stream order (engine/core/allocator.h). So staging is released only after the compute
// stream has been made to wait for its reduction: when bucket b launches, the staging of bucket
// b - kStagingInFlight is released. That bounds staging to about kStagingInFlight + 1 buckets
// (plus any bucket backward touched early but launches late, such as a GPT's tied embedding,
// whose first gradient comes from the output head), and makes compute wait only when the
// reductions fall kStagingInFlight buckets behind backward. (The planner counts
// kZero2StagingBuckets of them, parallel/bucket_plan.h.)
constexpr size_t kStagingInFlight = kZero2StagingBuckets - 1;

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
  make_events();
}

Reducer::Reducer(const GradientShard& shard, const std::vector<ParameterExtent>& extents,
                 Communicator& comm, Stream& compute, Stream& comm_stream,
                 const BucketOptions& options)
    : shard_(shard), extents_(extents), comm_(comm), compute_(compute), comm_stream_(comm_stream) {
  LS_CHECK(shard.owned.defined() && shard.owned.dtype() == DType::kF32 &&
               shard.owned.numel() == shard.shard_size &&
               shard.shard_size * comm.size() == shard.flat_size,
           "Reducer: the owned gradients (", shard.owned.describe(), ") must be f32 [",
           shard.shard_size, "], and ", comm.size(), " ranges of ", shard.shard_size,
           " must make the flat layout of ", shard.flat_size);
  LS_CHECK(!extents.empty() && extents.back().offset + extents.back().extent <= shard.flat_size,
           "Reducer: the parameter extents run past the flat layout of ", shard.flat_size);
  buckets_ = plan_buckets(extents, sizeof(float), options);
  staging_.resize(buckets_.size());
  make_events();
}

void Reducer::make_events() {
  size_t parameters = 0;
  for (const Bucket& bucket : buckets_) parameters += bucket.parameters.size();
  bucket_of_.resize(parameters);
  DeviceRuntime& runtime = device_runtime(compute_.device());
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

void Reducer::begin(bool accumulate) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].parameters.size());
  }
  next_launch_ = 0;
  next_release_ = 0;
  accumulate_ = accumulate;
}

Tensor& Reducer::staging(size_t b) {
  Tensor& buffer = staging_[b];
  if (!buffer.defined()) {
    buffer = Tensor::empty({buckets_[b].count}, DType::kF32, compute_.device());
    fill(buffer, 0.0f, compute_);  // padding between parameters must sum to zero too
  }
  return buffer;
}

Tensor Reducer::gradient_storage(int index, const Shape& shape) {
  LS_ASSERT(sharded() && index >= 0 && static_cast<size_t>(index) < bucket_of_.size(),
            "gradient storage for parameter ", index);
  const size_t b = bucket_of_[static_cast<size_t>(index)];
  LS_ASSERT(b >= next_launch_, "parameter ", index, "'s bucket ", b, " was reduced already");
  const int64_t offset = extents_[static_cast<size_t>(index)].offset - buckets_[b].offset;
  return staging(b).view(offset, shape);
}

void Reducer::release_staging(size_t b) {
  compute_.wait(*end_[b]);  // see Note [Sharded gradients]: the allocator reuses in compute order
  staging_[b] = Tensor();
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
  if (sharded()) {
    reduce_to_owners(b);
  } else {
    float* grads = flat_grads_.f32() + bucket.offset;
    const auto count = static_cast<size_t>(bucket.count);
    comm_.label_next("bucket " + std::to_string(b));
    comm_.all_reduce(grads, grads, count, DType::kF32, ReduceOp::kSum, comm_stream_);
  }
  comm_stream_.record(*end_[b]);
  while (sharded() && next_release_ + kStagingInFlight <= b) release_staging(next_release_++);
}

void Reducer::reduce_to_owners(size_t b) {
  const Bucket& bucket = buckets_[b];
  float* send = staging(b).f32();
  const int64_t size = shard_.shard_size;
  const int64_t end = bucket.offset + bucket.count;
  const int me = comm_.rank();
  int64_t mine_begin = -1, mine_end = -1;
  comm_.group_start();
  for (int64_t owner = bucket.offset / size; owner * size < end; ++owner) {
    const int64_t begin = std::max(bucket.offset, owner * size);
    const int64_t piece_end = std::min(end, (owner + 1) * size);
    float* piece = send + (begin - bucket.offset);
    // Off the owner, recv is not used (NCCL reads it on the root only): pass the send buffer.
    float* recv = piece;
    if (owner == me) {
      mine_begin = begin;
      mine_end = piece_end;
      if (!accumulate_) recv = shard_.owned.f32() + (begin - owner * size);
    }
    comm_.label_next("bucket " + std::to_string(b) + " to replica " + std::to_string(owner));
    comm_.reduce(piece, recv, static_cast<size_t>(piece_end - begin), DType::kF32, ReduceOp::kSum,
                 static_cast<int>(owner), comm_stream_);
  }
  comm_.group_end();
  if (accumulate_ && mine_begin >= 0) {  // this micro-batch's sums join the earlier ones
    axpy(1.0f, staging_[b].view(mine_begin - bucket.offset, {mine_end - mine_begin}),
         shard_.owned.view(mine_begin - static_cast<int64_t>(me) * size, {mine_end - mine_begin}),
         comm_stream_);
  }
}

void Reducer::finish() {
  compute_.record(*backward_end_);
  while (next_launch_ < buckets_.size()) launch(next_launch_++);
  comm_stream_.record(*all_reduced_);
  compute_.wait(*all_reduced_);
  // The compute stream now waits for every reduction: the staging may be handed out again.
  for (Tensor& buffer : staging_) buffer = Tensor();
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
