// Reducer (see parallel/data_parallel/reducer.h).
#include "parallel/data_parallel/reducer.h"

#include "ops/step_control.h"

#include <algorithm>

#include <lockstep/error.h>
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
// compute-stream order (lockstep/allocator.h). So staging is released only after the compute
// stream has been made to wait for its reduction: when bucket b launches, the staging of bucket
// b - kStagingInFlight is released. That bounds staging to about kStagingInFlight + 1 buckets
// (plus any bucket backward touched early but launches late, such as a GPT's tied embedding,
// whose first gradient comes from the output head), and makes compute wait only when the
// reductions fall kStagingInFlight buckets behind backward. (The planner counts
// kZero2StagingBuckets of them, parallel/bucket_plan.h.)
constexpr size_t kStagingInFlight = kZero2StagingBuckets - 1;

// Note [Fused bucket launches]
// Each launch costs NCCL a kernel launch and its synchronisation, which small buckets do not
// amortise. With BucketOptions::fuse_ready, the buckets that one call finds ready to launch
// (launch_ready_buckets: the next bucket in plan order plus those after it that were ready
// first, e.g. a weight's bucket waiting for its bias's; finish(): every bucket left) go out in
// one launch: one grads_ready event and one comm-stream wait, then their collectives in plan
// order inside one group_start()/group_end(). The collectives, their order and their sums are
// exactly those of one launch per bucket (a group changes nothing on the host communicators,
// which enqueue the calls of a group in order like any others), so results are bitwise equal.
// Every rank fuses the same buckets: all run the same backward over the same plan, so the hook
// fires in the same order everywhere and each call finds the same buckets ready.
// Inside a group NCCL launches nothing until group_end, so nothing but collectives may be
// enqueued between group_start and group_end (an event or a cast there would run before the
// collectives): the bf16 casts and ZeRO-2's accumulating axpy run before and after the group,
// and a launch is timed as a whole: start_[first] before it, then end_[b] and start_[b + 1]
// for its buckets after it, so every end_[b] follows bucket b's reduction (release_staging
// relies on that) and the buckets still tile the comm stream in order.
// ZeRO-2 fuses too: the reduces of every piece of the launch's buckets go in one group (without
// fusion, one group per bucket, as before).

// Note [Gradients reduced in bf16]
// With BucketOptions::reduce_dtype == kBF16 a launch casts each of its buckets' f32 gradients
// into that bucket's bf16 buffer on the comm stream, all-reduces the bf16 buffers in place and
// casts them back into the f32 gradients, still on the comm stream, before finish() makes the
// compute stream wait: the optimizer sees f32 gradients holding bf16 values, bitwise equal on
// every replica. The buffers are read and written by the comm stream only, while the allocator
// hands memory out again in compute-stream order (see Note [Sharded gradients]); short-lived
// buffers would need the same care as ZeRO-2's staging, so they are allocated once, in the
// constructor, and kept: half the size of the gradients. ZeRO-2 is refused with bf16 (its
// staging buffers would need a bf16 twin and its owned sums a second cast).

Reducer::Reducer(const Tensor& flat_grads, const std::vector<ParameterExtent>& extents,
                 Communicator& comm, Stream& compute, Stream& comm_stream,
                 const BucketOptions& options)
    : flat_grads_(flat_grads),
      fuse_ready_(options.fuse_ready),
      reduce_dtype_(options.reduce_dtype),
      comm_(comm),
      compute_(compute),
      comm_stream_(comm_stream) {
  LS_ASSERT(flat_grads.defined() && flat_grads.dtype() == DType::kF32,
            "Reducer: the gradient buffer must be a defined f32 tensor");
  LS_ASSERT(!extents.empty() && extents.back().offset + extents.back().extent <= flat_grads.numel(),
            "Reducer: the parameter extents run past the gradient buffer (", flat_grads.describe(),
            ")");
  buckets_ = plan_buckets(extents, sizeof(float), options);
  if (reduce_dtype_ == DType::kBF16) {  // see Note [Gradients reduced in bf16]: kept for good
    for (const Bucket& bucket : buckets_) {
      reduce_buffers_.push_back(Tensor::empty({bucket.count}, DType::kBF16, compute_.device()));
    }
  }
  make_events();
}

Reducer::Reducer(const GradientShard& shard, const std::vector<ParameterExtent>& extents,
                 Communicator& comm, Stream& compute, Stream& comm_stream,
                 const BucketOptions& options)
    : shard_(shard),
      extents_(extents),
      fuse_ready_(options.fuse_ready),
      comm_(comm),
      compute_(compute),
      comm_stream_(comm_stream) {
  LS_ASSERT(shard.owned.defined() && shard.owned.dtype() == DType::kF32 &&
                shard.owned.numel() == shard.shard_size &&
                shard.shard_size * comm.size() == shard.flat_size,
            "Reducer: the owned gradients (", shard.owned.describe(), ") must be f32 [",
            shard.shard_size, "], and ", comm.size(), " ranges of ", shard.shard_size,
            " must make the flat layout of ", shard.flat_size);
  LS_ASSERT(!extents.empty() && extents.back().offset + extents.back().extent <= shard.flat_size,
            "Reducer: the parameter extents run past the flat layout of ", shard.flat_size);
  buckets_ = plan_buckets(extents, sizeof(float), options);
  LS_CHECK(options.reduce_dtype == DType::kF32,
           "Reducer: BucketOptions::reduce_dtype = bf16 does not work with sharded gradients "
           "(ShardMode::kGradients, ZeRO-2, and kParameters, ZeRO-3) yet; use reduce_dtype = "
           "DType::kF32 with them, or "
           "bf16 with ShardMode::kOptimizer (ZeRO-1) or kNone");
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
    grads_ready_.push_back(runtime.create_sync_event());
    start_.push_back(runtime.create_event());
    end_.push_back(runtime.create_event());
  }
  backward_end_ = runtime.create_event();
  all_reduced_ = runtime.create_sync_event();
  launch_marks_ = Tensor::empty({4 * static_cast<int64_t>(buckets_.size())}, DType::kI32,
                                compute_.device());
  pending_.resize(buckets_.size());
  launch_of_.resize(buckets_.size());
}

void Reducer::begin(bool accumulate) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    pending_[b] = static_cast<int>(buckets_[b].parameters.size());
  }
  next_launch_ = 0;
  next_release_ = 0;
  accumulate_ = accumulate;
  if (!accumulate) launches_ = collectives_ = 0;  // a new step (not its next micro-batch)
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
  size_t end = next_launch_;
  while (end < buckets_.size() && pending_[end] == 0) ++end;
  launch_through(end);
}

void Reducer::launch_through(size_t end) {
  if (fuse_ready_ && end > next_launch_) {  // see Note [Fused bucket launches]
    launch(next_launch_, end);
    next_launch_ = end;
  }
  for (; next_launch_ < end; ++next_launch_) launch(next_launch_, next_launch_ + 1);
}

void Reducer::launch(size_t first, size_t end) {
  // A bucket that backward never reached (only unused parameters) gets its zeroed staging now,
  // on the compute stream before grads_ready, which the comm stream waits for.
  for (size_t b = first; sharded() && b < end; ++b) staging(b);
  compute_.record(*grads_ready_[first]);  // one event and one wait for the whole launch
  comm_stream_.wait(*grads_ready_[first]);
  comm_stream_.record(*start_[first]);
  // The device's clock at the launch's start and end, for every bucket it carries (the trace).
  for (size_t b = first; b < end; ++b) {
    stamp_device_clock(launch_marks_, static_cast<int32_t>(2 * b), comm_stream_);
  }
  if (sharded()) {
    comm_.group_start();  // one group per launch, however many buckets it fuses
    for (size_t b = first; b < end; ++b) reduce_to_owners(b);
    comm_.group_end();
    for (size_t b = first; accumulate_ && b < end; ++b) add_owned_sums(b);
  } else {
    all_reduce(first, end);
  }
  // See Note [Fused bucket launches]: the launch is timed as a whole, each end after its bucket.
  for (size_t b = first; b < end; ++b) {
    if (b > first) comm_stream_.record(*start_[b]);
    comm_stream_.record(*end_[b]);
    stamp_device_clock(launch_marks_, static_cast<int32_t>(2 * b + 1), comm_stream_);
    launch_of_[b] = launches_;
  }
  ++launches_;
  while (sharded() && next_release_ + kStagingInFlight < end) release_staging(next_release_++);
}

void Reducer::all_reduce(size_t first, size_t end) {
  const bool bf16 = reduce_dtype_ == DType::kBF16;  // see Note [Gradients reduced in bf16]
  auto gradients = [&](size_t b) {
    return flat_grads_.view(buckets_[b].offset, {buckets_[b].count});
  };
  for (size_t b = first; bf16 && b < end; ++b) cast(gradients(b), reduce_buffers_[b], comm_stream_);
  const bool group = end - first > 1;
  if (group) comm_.group_start();
  for (size_t b = first; b < end; ++b) {
    void* data = bf16 ? reduce_buffers_[b].data() : flat_grads_.f32() + buckets_[b].offset;
    comm_.label_next("bucket " + std::to_string(b));
    comm_.all_reduce(data, data, static_cast<size_t>(buckets_[b].count), reduce_dtype_,
                     ReduceOp::kSum, comm_stream_);
    ++collectives_;
  }
  if (group) comm_.group_end();
  for (size_t b = first; bf16 && b < end; ++b) cast(reduce_buffers_[b], gradients(b), comm_stream_);
}

void Reducer::reduce_to_owners(size_t b) {
  const Bucket& bucket = buckets_[b];
  float* send = staging(b).f32();
  const int64_t size = shard_.shard_size;
  const int64_t end = bucket.offset + bucket.count;
  for (int64_t owner = bucket.offset / size; owner * size < end; ++owner) {
    const int64_t begin = std::max(bucket.offset, owner * size);
    const int64_t piece_end = std::min(end, (owner + 1) * size);
    float* piece = send + (begin - bucket.offset);
    // Off the owner, recv is not used (NCCL reads it on the root only): pass the send buffer.
    float* recv = piece;
    if (owner == comm_.rank() && !accumulate_) recv = shard_.owned.f32() + (begin - owner * size);
    comm_.label_next("bucket " + std::to_string(b) + " to replica " + std::to_string(owner));
    comm_.reduce(piece, recv, static_cast<size_t>(piece_end - begin), DType::kF32, ReduceOp::kSum,
                 static_cast<int>(owner), comm_stream_);
    ++collectives_;
  }
}

void Reducer::add_owned_sums(size_t b) {
  // This micro-batch's sums (reduced in place into the staging) join the earlier ones.
  const Bucket& bucket = buckets_[b];
  const int64_t size = shard_.shard_size;
  const int64_t me = comm_.rank();
  const int64_t begin = std::max(bucket.offset, me * size);
  const int64_t end = std::min(bucket.offset + bucket.count, (me + 1) * size);
  if (begin >= end) return;  // no piece of this bucket is mine
  axpy(1.0f, staging_[b].view(begin - bucket.offset, {end - begin}),
       shard_.owned.view(begin - me * size, {end - begin}), comm_stream_);
}

void Reducer::finish() {
  compute_.record(*backward_end_);
  launch_through(buckets_.size());
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
  t.bucket_launch = launch_of_;
  t.backward_end_ms = backward_end_->elapsed_ms_since(reference);
  t.launches = launches_;
  t.collectives = collectives_;
  return t;
}

}  // namespace ls
