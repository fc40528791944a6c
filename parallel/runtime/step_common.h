// What DataParallel and Pipeline share to run a step and report its failure (internal): checking
// a batch, cutting it into Shards, and describing a worker's exception.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include <lockstep/data/dataset.h>
#include <lockstep/data/sampler.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/inputs.h>
#include <lockstep/nn/loss.h>
#include <lockstep/trainer.h>
#include "parallel/runtime/shard.h"

namespace ls {

// "message [context]" for an ls::Error (and "(file:line)" for an internal one), what() for others.
std::string describe_exception(const std::exception_ptr& error);
// The kind of a worker's error; anything not an ls::Error came from user code (a model or a
// factory) and is reported as internal.
ErrorKind error_kind_of(const std::exception_ptr& error);

class ProcessGroup;  // parallel/runtime/process_group.h

// The evaluation result from this process's counts (in order) and, across processes, every
// process's sums added in process order: the same result in every process. Counts stay exact
// in doubles below 2^53. Throws (failing the run) if the exchange cannot complete.
EvalResult combine_eval_counts(const std::vector<EvalCounts>& counts, ProcessGroup& processes);

// The loss's sum over `rows` rows of output and targets (lockstep/nn/loss.h), checked to be one
// element; targets_words: the device's target words of those rows (labels or f32 values),
// viewed as the loss's kind. Note [The loss contract] (parallel/data_parallel/replica.cpp).
Var loss_sum_of(const nn::Loss& loss, Tape& tape, const Var& output, const Tensor& targets_words,
                int64_t rows, int64_t width);

// Note [The loss contract]: a loss's sums over a step's rows [0, rows) and over [0, half) and
// [half, rows) must agree within 1e-4 relative (f32 sums of different lengths round apart);
// otherwise a usage error says so, the same for every strategy.
void check_loss_additive(const nn::Loss& loss, int64_t rows, int64_t half, double whole,
                         double first, double second);

// The batch's targets must be of the loss's kind (class labels or values); says what to fill.
void check_targets_kind(const nn::Loss& loss, const data::Batch& batch);

// The options' loss, or cross-entropy where they hold none (null is the default).
std::shared_ptr<const nn::Loss> loss_or_default(std::shared_ptr<const nn::Loss> loss);

// evaluate() reads a Dataset, which holds class labels: the loss must train on them.
void check_evaluable(const nn::Loss& loss);

// One evaluation chunk's loss: `value` times `to_sum` is its sum over the chunk's counted targets
// (the built-in cross-entropy gives its mean over the rows, turned into the sum in double on the
// host; a custom loss gives the sum itself, to_sum = 1).
struct ChunkLoss {
  Var value;
  double to_sum = 1.0;
};
ChunkLoss evaluation_loss(const nn::Loss& loss, Tape& tape, const Var& logits,
                          const Tensor& labels, int64_t rows, int64_t width);

// A batch's arrays must agree with its size, features and label width before any worker reads
// them. Returns the features per example (features == 0: inferred from the inputs).
int64_t check_batch(const data::Batch& batch);

// A Batch's value targets (a Dataset has none).
inline const float* targets_of(const data::Batch& batch) {
  return batch.targets.empty() ? nullptr : batch.targets.data();
}
inline const float* targets_of(const data::Dataset&) { return nullptr; }

// The rows [begin, end) of a Batch or Dataset (both lay examples out the same way).
template <typename Examples>
Shard shard_of(const Examples& ex, int64_t features, int64_t begin, int64_t end) {
  Shard all{ex.images.empty() ? nullptr : ex.images.data(),
            ex.tokens.empty() ? nullptr : ex.tokens.data(),
            ex.labels.empty() ? nullptr : ex.labels.data(),
            targets_of(ex),
            end,
            features,
            ex.label_width,
            0};
  return all.slice(begin, end - begin);
}
// A Batch's shard also carries its named inputs (a Dataset has none).
inline Shard shard_of(const data::Batch& batch, int64_t features, int64_t begin, int64_t end) {
  Shard shard = shard_of<data::Batch>(batch, features, begin, end);
  if (!batch.inputs.empty()) shard.named = &batch.inputs;
  return shard;
}

// `bytes` rounded up to a multiple of 64 (a cache line): the blocks of a staged or packed copy.
inline size_t round_up_64(size_t bytes) { return (bytes + 63) / 64 * 64; }

// Named inputs travel packed input-major in one byte buffer (one upload, one device tensor, so
// steps and their graphs keep a single input buffer): input i's rows from byte offsets[i], each
// block 64-byte aligned. `bytes` is the whole buffer's size.
struct PackedInputs {
  std::vector<size_t> offsets;
  size_t bytes = 0;
};
PackedInputs packed_layout(const std::vector<data::NamedInput>& inputs, int64_t rows);
// Packs the shard's named inputs into `out` (layout.bytes bytes) by `layout`, their
// packed_layout for the shard's rows.
void pack_inputs(const Shard& shard, const PackedInputs& layout, void* out);
// A hash of the inputs' names, dtypes and per-example shapes (a graph is kept per layout).
uint64_t input_layout_key(const std::vector<data::NamedInput>& inputs);
// The model's inputs for rows [begin, end) of a shard uploaded into `uploaded` (upload_shard).
nn::Inputs inputs_of_rows(Tape& tape, const Tensor& uploaded, const Shard& shard, int64_t begin,
                          int64_t end);

// Enqueues on `stream` the copy of a shard's inputs into `inputs` (and, with `with_labels`, its
// labels into `labels`), (re)allocating both on `device` when the shard's shape changed. The
// shard's host arrays must outlive the copies. Named inputs are copied from shard.packed.
void upload_shard(const Shard& shard, bool with_labels, Device device, Tensor& inputs,
                  Tensor& labels, Stream& stream);

}  // namespace ls
