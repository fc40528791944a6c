// Seeded epoch sampler and the batch iterator that walks a Dataset in its order.
//
// Contract: epoch e's order is a function of (seed, e) alone and identical on every platform
// (mt19937_64 + our own Fisher–Yates; std::shuffle's algorithm is implementation-defined), so a
// run resumed with seek(epoch, batch) replays exactly the batches of the original run.
// BatchIterator reuses the Batch's vectors: after the first batch, next() does not allocate.
// Not thread-safe: one Sampler and BatchIterator per consumer thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <lockstep/data/dataset.h>
#include <lockstep/data/named_input.h>

namespace ls::data {

class Sampler {
 public:
  Sampler(int64_t count, uint64_t seed, bool shuffle = true);

  // The example indices of the current epoch, a permutation of [0, count).
  std::span<const int64_t> order() const { return order_; }
  int64_t epoch() const { return epoch_; }
  void set_epoch(int64_t epoch);
  int64_t count() const { return count_; }

 private:
  int64_t count_;
  uint64_t seed_;
  bool shuffle_;
  int64_t epoch_ = 0;
  std::vector<int64_t> order_;
};

// The examples of one step, laid out like the Dataset they come from. The model's input is one
// of: `images`, `tokens`, or `inputs` (named inputs of any dtype and shape, for models with
// several inputs: lockstep/data/named_input.h).
struct Batch {
  int64_t size = 0;
  int64_t features = 0;         // per example; 0: inferred from the inputs' length
  int64_t label_width = 1;      // targets per example (labels or values)
  std::vector<float> images;    // size * features, or empty for token inputs
  std::vector<int32_t> tokens;  // size * features, or empty for float inputs
  std::vector<NamedInput> inputs;  // or named inputs (features is then 0)
  // The targets (lockstep/nn/loss.h): class labels for a loss on classes (cross-entropy), or
  // values for a loss on values (mse, bce_with_logits): exactly one holds size * label_width.
  std::vector<int32_t> labels;
  std::vector<float> targets;
};

// Copies the examples at `indices` into out (resizing, so capacity is reused).
void gather_batch(const Dataset& ds, std::span<const int64_t> indices, Batch& out);

class BatchIterator {
 public:
  // drop_last: skip the final partial batch, so every batch has batch_size examples.
  BatchIterator(const Dataset& ds, Sampler& sampler, int64_t batch_size, bool drop_last = true);

  // Fills out with the next batch of the sampler's current epoch; false at the end of the epoch.
  // Then advance with sampler.set_epoch(sampler.epoch() + 1) and reset().
  bool next(Batch& out);
  void reset() { position_ = 0; }
  // The number of batches already returned in the current epoch (the next batch's index).
  int64_t position() const { return position_; }
  // Continue from batch `index` of `epoch`, as saved from sampler.epoch() and position().
  void seek(int64_t epoch, int64_t index);
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

 private:
  const Dataset& ds_;
  Sampler& sampler_;
  int64_t batch_size_;
  int64_t batches_per_epoch_;
  int64_t position_ = 0;
};

}  // namespace ls::data
