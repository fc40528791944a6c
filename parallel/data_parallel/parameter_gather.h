// ParameterGather: one replica's ZeRO-3 (ShardMode::kParameters) source of whole parameter values
// (ParameterSource, lockstep/nn/autograd.h). Its ParameterStore keeps only range `rank` of the
// flat values; a tape's gather(p) brings p's whole value from the replicas owning its pieces, one
// broadcast per owner, on the replica's comm stream, with the next parameter's gather issued
// ahead (Note [Sharded parameters], parameter_gather.cpp).
// Thread-safety: the replica's thread only.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include <lockstep/nn/autograd.h>
#include <lockstep/nn/parameter.h>
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "parallel/comm/communicator.h"

namespace ls {

class ParameterGather final : public ParameterSource {
 public:
  // `store` keeps one range of the values (ParameterStore::values_sharded()); `comm` is the
  // replica's communicator, one rank per range. Gathers run on `comm_stream`, and `compute` (the
  // tapes' stream) waits for them.
  ParameterGather(const nn::ParameterStore& store, Communicator& comm, Stream& compute,
                  Stream& comm_stream, DeviceRuntime& runtime);
  ~ParameterGather() override;

  Tensor gather(Parameter& p) override;
  void expect(const std::vector<Parameter*>& order) override;

  // Before a training forward pass: gathers follow the order the first one used, one ahead.
  void begin_forward();
  // After a pass: drops what was gathered ahead and not used, once `compute` may reuse it.
  void finish();

  // Every value at once (one all-gather on `compute`), with each parameter's `value` a view of
  // it, for work whose replicas do not run alike (the loss-contract check over each replica's own
  // rows, once, for a loss other than cross-entropy); the views go with the object.
  class WholeValues {
   public:
    WholeValues(const nn::ParameterStore& store, Communicator& comm, Stream& compute);
    ~WholeValues();
    WholeValues(const WholeValues&) = delete;
    WholeValues& operator=(const WholeValues&) = delete;

   private:
    const nn::ParameterStore& store_;
    Tensor values_;
  };

 private:
  struct InFlight {
    Tensor value;
    std::unique_ptr<Event> ready;  // recorded on the comm stream after the broadcasts
  };
  InFlight issue(Parameter& p);
  // The parameter expected after `p` (found at or after the cursor), or null.
  Parameter* next_after(const Parameter& p);
  std::unique_ptr<Event> take_event();

  const nn::ParameterStore& store_;
  Communicator& comm_;
  Stream& compute_;
  Stream& comm_stream_;
  DeviceRuntime& runtime_;
  std::unique_ptr<Event> fence_;  // compute -> comm: the memory a gather writes is free
  std::vector<std::unique_ptr<Event>> spare_events_;
  std::unordered_map<const Parameter*, InFlight> ahead_;  // gathered ahead, not yet asked for
  std::vector<Parameter*> expected_;                      // the order gathers are expected in
  size_t cursor_ = 0;                      // where in expected_ the next gather is looked for
  std::vector<Parameter*> forward_order_;  // what the first training forward gathered
  std::vector<Parameter*> observed_;       // this forward's gathers, while learning
  bool learning_ = false;
};

}  // namespace ls
