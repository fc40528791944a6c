// A worker's rows of a step's global batch, and what an evaluation counts over them (internal):
// what every strategy hands its workers.
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/data/named_input.h>

namespace ls {

// A worker's rows of the global batch, in host memory owned by the caller: float inputs
// (images) or token ids, and label_width targets per row: class labels (kIgnoreLabel ones count
// for nothing) or f32 values.
struct Shard {
  const float* images = nullptr;    // rows * features, or null for token inputs
  const int32_t* tokens = nullptr;  // rows * features, or null for float inputs
  const int32_t* labels = nullptr;  // rows * label_width, or null for value targets
  const float* targets = nullptr;   // rows * label_width, or null for class labels
  int64_t rows = 0;
  int64_t features = 0;
  int64_t label_width = 1;
  int64_t first_row = 0;  // global index of the first row (dropout masks)
  // Or named inputs (lockstep/data/named_input.h): this shard's rows are rows [first_row,
  // first_row + rows) of each. `packed` is them packed for the upload (StepInputs).
  const std::vector<data::NamedInput>* named = nullptr;
  const void* packed = nullptr;

  // The rows [begin, begin + count) of this shard.
  Shard slice(int64_t begin, int64_t count) const;
  // Labels that count for the loss (not kIgnoreLabel); value targets all count.
  int64_t counted_labels() const;
  // The targets as the 4-byte words they travel in (labels or values).
  const void* target_words() const {
    return labels != nullptr ? static_cast<const void*>(labels) : static_cast<const void*>(targets);
  }
};

// What one worker's evaluation of its rows counted.
struct EvalCounts {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t rows = 0;  // labels counted (not kIgnoreLabel)
};

}  // namespace ls
