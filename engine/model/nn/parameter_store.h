// ParameterStore: puts every parameter of a model into ONE flat value buffer and every gradient
// into ONE flat gradient buffer on a device; each Parameter's value and grad become views.
//
// One buffer each is what makes data parallelism cheap: the Reducer all-reduces views of the
// gradient buffer in place (no packing copies), and an optimizer updates all parameters in one
// fused pass. Each parameter starts at a multiple of kAlignment elements; the padding between
// parameters is zero in both buffers and stays zero under SGD and AdamW.
// Initial values depend only on the seed and the model's parameter list (drawn on the host in
// registration order), so every device and backend starts from bitwise the same parameters.
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

  // Places the parameters, initialises them from `seed` and zeroes the gradients; synchronizes
  // `stream` before returning. With shards > 1 the flat buffers are padded (with zeros) to
  // shards equal, aligned ranges, so a sharded optimizer can own one each (shard_view).
  ParameterStore(Module& model, Device device, Stream& stream, uint64_t seed, int shards = 1,
                 Gradients gradients = Gradients::kFlat);
  // The same over a chosen list of parameters (a pipeline stage's part of a model), placed and
  // initialised in the list's order (a pipeline gives them Init::from_values slices of the whole
  // model's initial values, so a stage starts exactly where the single-device model does).
  ParameterStore(std::vector<Parameter*> parameters, Device device, Stream& stream, uint64_t seed,
                 int shards = 1, Gradients gradients = Gradients::kFlat);

  const std::vector<Parameter*>& parameters() const { return parameters_; }
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }  // undefined with Gradients::kNone
  int64_t parameter_count() const { return parameter_count_; }  // without padding
  int shards() const { return shards_; }
  int64_t shard_size() const { return values_.numel() / shards_; }  // elements per shard
  // Shard s of a flat buffer laid out like values() (values(), grads(), or a copy of them).
  Tensor shard_view(const Tensor& flat, int shard) const;
  Device device() const { return values_.device(); }

  void zero_grad(Stream& stream);  // nothing to do with Gradients::kNone

  // Host copies of all values, in flat-buffer order (synchronizes; for tests and checkpoints).
  std::vector<float> values_to_host(Stream& stream) const;

 private:
  std::vector<Parameter*> parameters_;
  Tensor values_;
  Tensor grads_;
  int64_t parameter_count_ = 0;
  int shards_ = 1;
};

// The initial values of a model's parameters for a seed, laid out as in a ParameterStore.
std::vector<float> initial_values(const std::vector<Parameter*>& parameters, int64_t flat_size,
                                  uint64_t seed);

}  // namespace ls::nn
