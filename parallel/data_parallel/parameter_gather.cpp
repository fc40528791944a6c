// ParameterGather (see parallel/data_parallel/parameter_gather.h).
#include "parallel/data_parallel/parameter_gather.h"

#include <algorithm>
#include <string>

#include <lockstep/error.h>

namespace ls {

// Note [Sharded parameters]
// ZeRO-3 keeps ZeRO-2's layout: the flat buffer is cut into N equal ranges, and replica r keeps
// range r of the values, of the summed gradients and of the optimizer state, so the Reducer's
// reduce-to-owners and the sharded optimizer run unchanged; only the whole value buffer is gone.
// A parameter's value is gathered when a tape needs it (Tape::parameter, and in backward the
// first node that reads it): one broadcast from each replica whose range the parameter's extent
// crosses (usually one), into a tensor of its own. The tape drops it at the end of the layer in
// forward and after its last use in backward; the allocator then reuses the memory.
// Order: gathers are collectives, so every replica issues them alike. They go on the comm stream,
// where the Reducer's bucket reductions run: a communicator runs one collective at a time, and
// one stream keeps them in issue order. The compute stream waits for a gather's event.
// Memory: a gather writes fresh memory from the comm stream, and the allocator hands out blocks
// in compute-stream order (lockstep/allocator.h), so the comm stream first waits for the compute
// stream to reach the point where the gather was issued (fence_): whatever the block held before
// has been read by then.
// Prefetch: the gather of the next parameter is issued as soon as this one is asked for, so it
// runs while the compute stream works with this one. "Next" is the order the first training
// forward pass gathered in (begin_forward), and in backward the order the tape's nodes will ask
// (expect). A gather out of that order is simply issued then; a gather issued ahead and never
// asked for is dropped by finish(). Every replica sees the same asks, so all decide alike.
// Results are bitwise those of ZeRO-2: the same values reach the same kernels.

ParameterGather::ParameterGather(const nn::ParameterStore& store, Communicator& comm,
                                 Stream& compute, Stream& comm_stream, DeviceRuntime& runtime)
    : store_(store),
      comm_(comm),
      compute_(compute),
      comm_stream_(comm_stream),
      runtime_(runtime),
      fence_(runtime.create_event()) {
  LS_ASSERT(store.values_sharded() && store.shards() == comm.size(),
            "ParameterGather needs a store keeping one of ", comm.size(), " ranges");
}

ParameterGather::~ParameterGather() = default;

std::unique_ptr<Event> ParameterGather::take_event() {
  if (spare_events_.empty()) return runtime_.create_event();
  std::unique_ptr<Event> event = std::move(spare_events_.back());
  spare_events_.pop_back();
  return event;  // a wait already enqueued on it keeps its own target: it may be recorded again
}

ParameterGather::InFlight ParameterGather::issue(Parameter& p) {
  InFlight out{Tensor::empty(p.shape, DType::kF32, store_.device()), take_event()};
  compute_.record(*fence_);
  comm_stream_.wait(*fence_);
  const int64_t shard = store_.shard_size();
  const int64_t begin = p.offset, end = p.offset + p.numel();
  for (int64_t owner = begin / shard; owner * shard < end; ++owner) {
    const int64_t from = std::max(begin, owner * shard), to = std::min(end, (owner + 1) * shard);
    Tensor piece = out.value.view(from - begin, {to - from});
    const bool mine = owner == store_.values_rank();
    const void* send =
        mine ? store_.values().view(from - owner * shard, {to - from}).data() : piece.data();
    comm_.label_next("parameter " + p.name);
    comm_.broadcast(send, piece.data(), static_cast<size_t>(to - from), DType::kF32,
                    static_cast<int>(owner), comm_stream_);
  }
  comm_stream_.record(*out.ready);
  return out;
}

Parameter* ParameterGather::next_after(const Parameter& p) {
  for (size_t i = cursor_; i < expected_.size(); ++i) {
    if (expected_[i] != &p) continue;
    cursor_ = i + 1;
    return cursor_ < expected_.size() ? expected_[cursor_] : nullptr;
  }
  return nullptr;  // out of the expected order: nothing is gathered ahead
}

Tensor ParameterGather::gather(Parameter& p) {
  if (learning_) observed_.push_back(&p);
  InFlight now;
  if (auto it = ahead_.find(&p); it != ahead_.end()) {
    now = std::move(it->second);
    ahead_.erase(it);
  } else {
    now = issue(p);
  }
  Parameter* next = next_after(p);
  if (next != nullptr && next != &p && !ahead_.count(next)) ahead_.emplace(next, issue(*next));
  compute_.wait(*now.ready);
  spare_events_.push_back(std::move(now.ready));
  return now.value;
}

void ParameterGather::begin_forward() {
  learning_ = forward_order_.empty();
  observed_.clear();
  expected_ = forward_order_;
  cursor_ = 0;
}

void ParameterGather::expect(const std::vector<Parameter*>& order) {
  if (learning_) {
    forward_order_ = observed_;
    learning_ = false;
  }
  expected_ = order;
  cursor_ = 0;
}

void ParameterGather::finish() {
  for (auto& [parameter, in_flight] : ahead_) {
    compute_.wait(*in_flight.ready);  // the memory is the compute stream's again after this
    spare_events_.push_back(std::move(in_flight.ready));
  }
  ahead_.clear();
  expected_.clear();
  cursor_ = 0;
  learning_ = false;
}

ParameterGather::WholeValues::WholeValues(const nn::ParameterStore& store, Communicator& comm,
                                          Stream& compute)
    : store_(store), values_(Tensor::empty({store.flat_size()}, DType::kF32, store.device())) {
  comm.label_next("whole parameters");
  comm.all_gather(store.values().data(), values_.data(), static_cast<size_t>(store.shard_size()),
                  DType::kF32, compute);
  for (Parameter* p : store.parameters()) p->value = values_.view(p->offset, p->shape);
}

ParameterGather::WholeValues::~WholeValues() {
  for (Parameter* p : store_.parameters()) p->value = Tensor();
}

}  // namespace ls
