// ParameterStore (see engine/model/nn/parameter_store.h).
#include "engine/model/nn/parameter_store.h"

#include <algorithm>
#include <cmath>
#include <random>

#include <lockstep/error.h>
#include "ops/elementwise.h"

namespace ls::nn {
namespace {

// A portable uniform float in [0, 1) from 24 random bits: std::uniform_real_distribution's
// algorithm is implementation-defined, and initial values must not depend on the C++ library.
float unit_uniform(std::mt19937_64& rng) { return static_cast<float>(rng() >> 40) * 0x1p-24f; }

void fill_init(const Init& init, std::span<float> out, std::mt19937_64& rng) {
  switch (init.kind) {
    case Init::Kind::kZeros: std::fill(out.begin(), out.end(), 0.0f); break;
    case Init::Kind::kOnes: std::fill(out.begin(), out.end(), 1.0f); break;
    case Init::Kind::kUniform:
      for (float& x : out) x = (2.0f * unit_uniform(rng) - 1.0f) * init.scale;
      break;
    case Init::Kind::kNormal:  // Box-Muller, one value per pair of draws
      for (float& x : out) {
        const float u1 = 1.0f - unit_uniform(rng);  // (0, 1]: log is finite
        const float u2 = unit_uniform(rng);
        x = init.scale * std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
      }
      break;
    case Init::Kind::kValues:
      LS_CHECK(init.values != nullptr && init.values->size() == out.size(),
               "initial values: ", init.values ? init.values->size() : 0,
               " given for a parameter of ", out.size(), " elements");
      std::copy(init.values->begin(), init.values->end(), out.begin());
      break;
  }
}

}  // namespace

std::vector<float> initial_values(const std::vector<Parameter*>& parameters, int64_t flat_size,
                                  uint64_t seed) {
  return initial_values_range(parameters, 0, flat_size, seed);
}

std::vector<float> initial_values_range(const std::vector<Parameter*>& parameters, int64_t begin,
                                        int64_t end, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(end - begin), 0.0f);
  std::vector<float> one;  // each parameter's values in turn: the draws follow the list
  std::mt19937_64 rng(seed);
  for (const Parameter* p : parameters) {
    one.resize(static_cast<size_t>(p->numel()));
    fill_init(p->init, one, rng);
    const int64_t from = std::max(begin, p->offset), to = std::min(end, p->offset + p->numel());
    if (from < to) {
      std::copy(one.begin() + (from - p->offset), one.begin() + (to - p->offset),
                values.begin() + (from - begin));
    }
  }
  return values;
}

ParameterStore::ParameterStore(Module& model, Device device, Stream& stream, uint64_t seed,
                               int shards, Gradients gradients, Values values)
    : ParameterStore(model.parameters(), device, stream, seed, shards, gradients, values) {}

ParameterStore::ParameterStore(std::vector<Parameter*> parameters, Device device, Stream& stream,
                               uint64_t seed, int shards, Gradients gradients, Values values)
    : parameters_(std::move(parameters)),
      shards_(shards),
      values_kind_(values.kind),
      values_rank_(values.rank) {
  LS_CHECK(shards >= 1, "ParameterStore: shards is ", shards, "; it must be at least 1");
  LS_CHECK(!values_sharded() || (values.rank >= 0 && values.rank < shards),
           "ParameterStore: range ", values.rank, " of ", shards, " does not exist; keep one of "
           "ranges 0 to ", shards - 1);
  LS_CHECK(!values_sharded() || gradients == Gradients::kNone,
           "ParameterStore: a store keeping one range of the values keeps no flat gradient "
           "buffer either (Gradients::kNone)");
  LS_CHECK(!parameters_.empty(), "ParameterStore: the model has no parameters");
  LS_CHECK(stream.device() == device, "ParameterStore: the stream is on ", stream.device().str(),
           ", the parameters go to ", device.str());
  int64_t offset = 0;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter* p = parameters_[i];
    LS_CHECK(!p->value.defined(), "parameter '", p->name,
             "' already lives in another ParameterStore; build one model per store");
    LS_CHECK(p->padded_rows == 0 || (p->shape.size() == 2 && p->padded_rows >= p->shape[0]),
             "parameter '", p->name, "' asks for room for ", p->padded_rows,
             " rows; only a 2-D parameter can, and no fewer than its ",
             p->shape.empty() ? 0 : p->shape[0], " rows");
    p->offset = offset;
    p->index = static_cast<int>(i);
    parameter_count_ += p->numel();
    const int64_t extent =
        p->padded_rows > 0 ? std::max(p->numel(), p->padded_rows * p->shape[1]) : p->numel();
    offset += (extent + kAlignment - 1) / kAlignment * kAlignment;
  }
  // Equal aligned shards: any parameter count on any device count (the tail is zero padding).
  const int64_t shard = (offset + shards - 1) / shards;
  flat_size_ = (shard + kAlignment - 1) / kAlignment * kAlignment * shards;
  values_ = Tensor::empty({values_sharded() ? shard_size() : flat_size_}, DType::kF32, device);
  if (gradients == Gradients::kFlat) grads_ = Tensor::empty({flat_size_}, DType::kF32, device);
  for (Parameter* p : parameters_) {
    if (!values_sharded()) p->value = values_.view(p->offset, p->shape);
    if (grads_.defined()) p->grad = grads_.view(p->offset, p->shape);
  }
  // A store keeping one range draws every value (the draws follow the parameter list) but keeps
  // only its range: host memory of the range and the largest parameter, not of the model.
  const int64_t begin = values_sharded() ? values_rank_ * shard_size() : 0;
  std::vector<float> init =
      initial_values_range(parameters_, begin, begin + values_.numel(), seed);
  values_.copy_from_host_async(init.data(), init.size() * sizeof(float), stream);
  zero_grad(stream);
  stream.synchronize();  // `init` must outlive the copy
}

Tensor ParameterStore::shard_view(const Tensor& flat, int shard) const {
  LS_ASSERT(shard >= 0 && shard < shards_ && flat.numel() == flat_size_,
            "shard ", shard, " of ", shards_);
  return flat.view(shard * shard_size(), {shard_size()});
}

void ParameterStore::zero_grad(Stream& stream) {
  if (grads_.defined()) fill(grads_, 0.0f, stream);
}

void ParameterStore::keep_bf16_copy(Stream& stream) {
  LS_CHECK(!values16_.defined(), "ParameterStore: the bf16 copy is already kept");
  LS_CHECK(!values_sharded(), "ParameterStore: a store keeping a range of the values keeps no "
           "bf16 copy (sharded parameters train in f32)");
  values16_ = Tensor::empty(values_.shape(), DType::kBF16, values_.device());
  for (Parameter* p : parameters_) {
    p->value16 = values16_.view(p->offset, p->shape);
    // The room after the values is zero in values_ (never written: no gradient reaches it), so it
    // is zero in the copy too.
    if (p->padded_rows > 0)
      p->padded_value16 = values16_.view(p->offset, {p->padded_rows, p->shape[1]});
  }
  round_bf16_copy(stream);
}

void ParameterStore::round_bf16_copy(Stream& stream) {
  if (values16_.defined()) cast(values_, values16_, stream);
}

void ParameterStore::copy_values_from_host(const float* values, Stream& stream) {
  const float* kept = values_sharded() ? values + values_rank_ * shard_size() : values;
  values_.copy_from_host_async(kept, values_.nbytes(), stream);
  round_bf16_copy(stream);
}

std::vector<float> ParameterStore::values_to_host(Stream& stream) const {
  return values_.to_host_f32(stream);
}

}  // namespace ls::nn
