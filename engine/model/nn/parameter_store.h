// ParameterStore: puts every parameter of a model into ONE flat value buffer and every gradient
// into ONE flat gradient buffer on a device; each Parameter's value and grad become views.
//
// One buffer each is what makes data parallelism cheap: the Reducer all-reduces views of the
// gradient buffer in place (no packing copies), and an optimizer updates all parameters in one
// fused pass. Each parameter starts at a multiple of kAlignment elements; the padding between
// parameters is zero in both buffers and stays zero under SGD and AdamW.
// Initial values depend only on the seed and the model's parameter list (drawn on the host in
// registration order), so every device and backend starts from bitwise the same parameters.
//
// Note [The bf16 copy of the weights]
// In bf16 a product multiplies bf16 operands (lockstep/precision.h). Rounding each weight in every
// product that uses it would round it once per micro-batch; instead a store that trains in bf16
// keeps a flat bf16 copy of its values (keep_bf16_copy), each parameter's `value16` a view of it,
// and nn::linear multiplies with that view. The copy holds exactly f32_to_bf16 of the values at
// all times outside a step's optimizer pass, so every result is bitwise what rounding in the
// product gives. Whatever writes the values keeps it so: the optimizer writes the copy in its own
// pass (Optimizer::step_and_round); a checkpoint load goes through copy_values_from_host; a write
// by the engine's collectives (the initial broadcast, ZeRO's all-gather of updated shards) is
// followed by round_bf16_copy.
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/nn/module.h>

namespace ls::nn {

class ParameterStore {
 public:
  static constexpr int64_t kAlignment = 64;  // elements: 256 bytes, cuBLAS and AVX friendly

  // Whether the store holds the flat gradient buffer (kFlat), or none (kNone: each parameter's
  // `grad` stays undefined and the tape asks for gradient storage when backward reaches the
  // parameter; ZeRO-2, where gradients live in short-lived bucket buffers, see Tape::GradStorage).
  enum class Gradients { kFlat, kNone };
  // Whether the store holds every value (kWhole: each parameter's `value` is a view), or only
  // the range `rank` of the flat layout (kRange, ZeRO-3: `value` stays undefined, and a tape
  // gets a parameter's whole value from its ParameterSource; Note [Sharded parameters],
  // parallel/data_parallel/parameter_gather.cpp).
  struct Values {
    enum class Kind { kWhole, kRange };
    Kind kind = Kind::kWhole;
    int rank = 0;  // kRange: which of the shards ranges this store keeps
    static Values whole() { return {}; }
    static Values range(int rank) { return {Kind::kRange, rank}; }
  };

  // Places the parameters, initialises them from `seed` and zeroes the gradients; synchronizes
  // `stream` before returning. With shards > 1 the flat buffers are padded (with zeros) to
  // shards equal, aligned ranges, so a sharded optimizer can own one each (shard_view).
  ParameterStore(Module& model, Device device, Stream& stream, uint64_t seed, int shards = 1,
                 Gradients gradients = Gradients::kFlat, Values values = Values::whole());
  // The same over a chosen list of parameters (a pipeline stage's part of a model), placed and
  // initialised in the list's order (a pipeline gives them Init::from_values slices of the whole
  // model's initial values, so a stage starts exactly where the single-device model does).
  ParameterStore(std::vector<Parameter*> parameters, Device device, Stream& stream, uint64_t seed,
                 int shards = 1, Gradients gradients = Gradients::kFlat,
                 Values values = Values::whole());

  const std::vector<Parameter*>& parameters() const { return parameters_; }
  // Every value (flat_size() elements), or with Values::kRange the kept range (shard_size()).
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }  // undefined with Gradients::kNone
  int64_t parameter_count() const { return parameter_count_; }  // without padding
  int64_t flat_size() const { return flat_size_; }  // the flat layout's elements, padding included
  int shards() const { return shards_; }
  int64_t shard_size() const { return flat_size_ / shards_; }  // elements per shard
  bool values_sharded() const { return values_kind_ == Values::Kind::kRange; }
  int values_rank() const { return values_rank_; }  // the range kept (0 when whole)
  // Shard s of a flat buffer laid out like values() (values(), grads(), or a copy of them).
  Tensor shard_view(const Tensor& flat, int shard) const;
  // The values this store's owner updates: all of them, its shard of them (`shard`), or, with
  // Values::kRange, the range it keeps.
  Tensor owned_values(int shard) const {
    return values_sharded() ? values_ : shards_ > 1 ? shard_view(values_, shard) : values_;
  }
  Device device() const { return values_.device(); }

  void zero_grad(Stream& stream);  // nothing to do with Gradients::kNone

  // Note [The bf16 copy of the weights]: allocates the copy, gives each parameter its view
  // (Parameter::value16) and rounds the values into it. Once per store.
  void keep_bf16_copy(Stream& stream);
  const Tensor& values16() const { return values16_; }  // undefined without keep_bf16_copy
  // Rounds the values into the copy again, after something other than the optimizer's
  // step_and_round wrote them; nothing to do without a copy.
  void round_bf16_copy(Stream& stream);
  // Writes the values from host memory holding every value (flat_size() floats, padding
  // included; a Values::kRange store reads its range of them), and the copy with them;
  // asynchronous: `values` must stay valid until the stream has run the copy.
  void copy_values_from_host(const float* values, Stream& stream);

  // Host copies of the values kept (all, or the range), in flat-buffer order (synchronizes; for
  // tests and checkpoints).
  std::vector<float> values_to_host(Stream& stream) const;

 private:
  std::vector<Parameter*> parameters_;
  Tensor values_;
  Tensor values16_;  // Note [The bf16 copy of the weights]; undefined unless kept
  Tensor grads_;
  int64_t parameter_count_ = 0;
  int64_t flat_size_ = 0;
  int shards_ = 1;
  Values::Kind values_kind_ = Values::Kind::kWhole;
  int values_rank_ = 0;
};

// The initial values of a model's parameters for a seed, laid out as in a ParameterStore.
std::vector<float> initial_values(const std::vector<Parameter*>& parameters, int64_t flat_size,
                                  uint64_t seed);
// Elements [begin, end) of the same layout (every value is drawn; only these are kept).
std::vector<float> initial_values_range(const std::vector<Parameter*>& parameters, int64_t begin,
                                        int64_t end, uint64_t seed);

}  // namespace ls::nn
