// Sampler: per-epoch permutations from mt19937_64 seeded by splitmix64(seed, epoch), shuffled by
// Fisher–Yates with unbiased rejection sampling, so the order is the same with every standard
// library. BatchIterator slices that order into batches and gathers them into a reused Batch.
#include <lockstep/data/sampler.h>

#include <algorithm>
#include <numeric>
#include <random>

#include <lockstep/error.h>
#include "engine/model/data/splitmix64.h"

namespace ls::data {
namespace {

// Uniform in [0, bound) without modulo bias; std::uniform_int_distribution is
// implementation-defined, so it would break cross-platform reproducibility.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

}  // namespace

Sampler::Sampler(int64_t count, uint64_t seed, bool shuffle)
    : count_(count), seed_(seed), shuffle_(shuffle) {
  LS_CHECK(count > 0, "Sampler: count is ", count, "; it must be the (positive) data set size");
  order_.resize(static_cast<size_t>(count));
  set_epoch(0);
}

void Sampler::set_epoch(int64_t epoch) {
  LS_CHECK(epoch >= 0, "Sampler::set_epoch: epoch is ", epoch, "; epochs count from 0");
  epoch_ = epoch;
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (!shuffle_) return;
  std::mt19937_64 rng(splitmix64(splitmix64(seed_) ^ static_cast<uint64_t>(epoch)));
  for (size_t i = order_.size() - 1; i > 0; --i) {
    size_t j = static_cast<size_t>(uniform_below(rng, i + 1));
    std::swap(order_[i], order_[j]);
  }
}

void gather_batch(const Dataset& ds, std::span<const int64_t> indices, Batch& out) {
  size_t n = indices.size();
  const size_t features = static_cast<size_t>(ds.features);
  const size_t width = static_cast<size_t>(ds.label_width);
  out.size = static_cast<int64_t>(n);
  out.features = ds.features;
  out.label_width = ds.label_width;
  out.images.resize(ds.has_tokens() ? 0 : n * features);
  out.tokens.resize(ds.has_tokens() ? n * features : 0);
  out.labels.resize(n * width);
  for (size_t b = 0; b < n; ++b) {
    const int64_t i = indices[b];
    LS_CHECK(i >= 0 && i < ds.count, "gather_batch: index ", i, " at position ", b,
             " is outside data set '", ds.name, "' of ", ds.count, " examples");
    const size_t at = static_cast<size_t>(i);
    if (ds.has_tokens()) {
      std::copy_n(ds.tokens.data() + at * features, features, out.tokens.data() + b * features);
    } else {
      std::copy_n(ds.images.data() + at * features, features, out.images.data() + b * features);
    }
    std::copy_n(ds.labels.data() + at * width, width, out.labels.data() + b * width);
  }
}

BatchIterator::BatchIterator(const Dataset& ds, Sampler& sampler, int64_t batch_size,
                             bool drop_last)
    : ds_(ds), sampler_(sampler), batch_size_(batch_size) {
  check_dataset(ds);
  LS_CHECK(sampler.count() == ds.count, "BatchIterator: sampler covers ", sampler.count(),
           " examples but data set '", ds.name, "' has ", ds.count,
           "; construct the Sampler with the data set's count");
  LS_CHECK(batch_size > 0, "BatchIterator: batch_size is ", batch_size, "; it must be > 0");
  LS_CHECK(!drop_last || batch_size <= ds.count, "BatchIterator: batch_size ", batch_size,
           " exceeds the ", ds.count, " examples of data set '", ds.name,
           "', so with drop_last no batch would be produced; use a batch_size <= ", ds.count,
           " or drop_last = false");
  batches_per_epoch_ = drop_last ? ds.count / batch_size : (ds.count + batch_size - 1) / batch_size;
}

bool BatchIterator::next(Batch& out) {
  if (position_ >= batches_per_epoch_) return false;
  int64_t start = position_ * batch_size_;
  int64_t n = std::min(batch_size_, ds_.count - start);
  gather_batch(ds_, sampler_.order().subspan(static_cast<size_t>(start), static_cast<size_t>(n)),
               out);
  ++position_;
  return true;
}

void BatchIterator::seek(int64_t epoch, int64_t index) {
  LS_CHECK(index >= 0 && index <= batches_per_epoch_, "BatchIterator::seek: batch index ", index,
           " is outside 0..", batches_per_epoch_,
           " (batches per epoch); was the checkpoint saved with another batch size?");
  if (epoch != sampler_.epoch()) sampler_.set_epoch(epoch);
  position_ = index;
}

}  // namespace ls::data
