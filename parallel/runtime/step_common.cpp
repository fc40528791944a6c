// Shared step helpers (see parallel/runtime/step_common.h).
#include "parallel/runtime/step_common.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include <lockstep/nn/functional.h>
#include <lockstep/trainer.h>
#include "parallel/runtime/process_group.h"

namespace ls {

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kBlocks: return "blocks";
  }
  return "?";
}

EvalResult combine_eval_counts(const std::vector<EvalCounts>& counts, ProcessGroup& processes) {
  std::array<double, 3> mine{};
  for (const EvalCounts& c : counts) {
    mine[0] += c.loss_sum;
    mine[1] += static_cast<double>(c.correct);
    mine[2] += static_cast<double>(c.rows);
  }
  const std::vector<double> sums =
      processes.sum_over_processes(mine, "evaluate: combining the processes' counts");
  EvalResult result;
  result.examples = static_cast<int64_t>(sums[2]);
  result.loss = sums[0] / static_cast<double>(result.examples);
  result.accuracy = sums[1] / static_cast<double>(result.examples);
  return result;
}

std::string describe_exception(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.what();  // "message [context]", and where, for an internal error
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown exception";
  }
}

ErrorKind error_kind_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return e.kind();
  } catch (...) {
    return ErrorKind::kInternal;
  }
}

void check_loss_additive(const nn::Loss& loss, int64_t rows, int64_t half, double whole,
                         double first, double second) {
  const double parts = first + second;
  LS_CHECK_AS(ErrorKind::kUsage,
              std::abs(whole - parts) <= 1e-4 * std::max(std::abs(whole), std::abs(parts)) + 1e-6,
              "the loss '", loss.name(),
              "' breaks the loss contract (lockstep/nn/loss.h): its "
              "value over ",
              rows, " rows is ", whole, ", but over rows [0, ", half, ") and [", half, ", ", rows,
              ") it is ", first, " + ", second, " = ", parts,
              ". A loss returns the SUM of per-target terms (not a mean, no batch statistics); "
              "the engine divides by the global count. Set "
              "TrainingOptions::check_loss_contract = false only for a loss that is additive up "
              "to rounding");
}

Var loss_sum_of(const nn::Loss& loss, Tape& tape, const Var& output, const Tensor& targets_words,
                int64_t rows, int64_t width) {
  const DType dtype = loss.targets() == nn::TargetKind::kValues ? DType::kF32 : DType::kI32;
  Var sum = loss.sum(tape, output, targets_words.view_as(dtype, 0, {rows, width}));
  LS_CHECK(sum->value.numel() == 1, "the loss '", loss.name(), "' returned ",
           sum->value.describe(), "; a loss returns the sum of its terms, one element "
           "(lockstep/nn/loss.h)");
  return sum;
}

void check_targets_kind(const nn::Loss& loss, const data::Batch& batch) {
  if (loss.targets() == nn::TargetKind::kValues) {
    LS_CHECK(!batch.targets.empty(), "the loss '", loss.name(), "' trains on value targets, but "
             "the batch has none; fill batch.targets (size * label_width values)");
  } else {
    LS_CHECK(!batch.labels.empty(), "the loss '", loss.name(), "' trains on class labels, but "
             "the batch has value targets; fill batch.labels, or choose a loss on values "
             "(mse_loss, bce_with_logits_loss) in the options' loss");
  }
}

std::shared_ptr<const nn::Loss> loss_or_default(std::shared_ptr<const nn::Loss> loss) {
  return loss != nullptr ? std::move(loss) : nn::cross_entropy_loss();
}

void check_evaluable(const nn::Loss& loss) {
  LS_CHECK(loss.targets() == nn::TargetKind::kClasses, "evaluate: a data set holds class labels, "
           "and the loss '", loss.name(), "' trains on value targets; evaluate it with your own "
           "forward passes (lockstep/nn/module.h) or step() results");
}

ChunkLoss evaluation_loss(const nn::Loss& loss, Tape& tape, const Var& logits,
                          const Tensor& labels, int64_t rows, int64_t width) {
  if (nn::is_cross_entropy(loss)) {
    return {nn::cross_entropy(tape, logits, labels), static_cast<double>(logits->value.dim(0))};
  }
  return {loss_sum_of(loss, tape, logits, labels, rows, width), 1.0};
}

int64_t check_batch(const data::Batch& batch) {
  if (!batch.inputs.empty()) {
    LS_CHECK(batch.images.empty() && batch.tokens.empty(), "malformed batch: it has named inputs "
             "and also ", batch.images.size(), " float inputs and ", batch.tokens.size(),
             " token inputs; give the model's inputs one way (named inputs, or images or tokens)");
    LS_CHECK(batch.features == 0, "malformed batch: features is ", batch.features,
             ", but the batch has named inputs (their shapes say it); leave features 0");
    data::check_named_inputs(batch.inputs, batch.size);
    LS_CHECK((batch.labels.empty() || batch.targets.empty()) &&
                 batch.labels.size() + batch.targets.size() ==
                     static_cast<size_t>(batch.size * batch.label_width),
             "malformed batch: ", batch.size, " examples of ", batch.label_width,
             " target(s), but ", batch.labels.size(), " labels and ", batch.targets.size(),
             " value targets; fill exactly one of labels and targets with size * label_width");
    return 0;
  }
  const size_t inputs = batch.tokens.empty() ? batch.images.size() : batch.tokens.size();
  const int64_t features = batch.features > 0 || batch.size <= 0
                               ? batch.features
                               : static_cast<int64_t>(inputs / static_cast<size_t>(batch.size));
  LS_CHECK((batch.labels.empty() || batch.targets.empty()) &&
               data::examples_fit(batch.size, features, batch.label_width, batch.images.size(),
                                  batch.tokens.size(),
                                  batch.labels.size() + batch.targets.size()),
           "malformed batch: ", batch.size, " examples of ", features, " features and ",
           batch.label_width, " target(s), but ", batch.images.size(), " float inputs, ",
           batch.tokens.size(), " token inputs, ", batch.labels.size(), " labels and ",
           batch.targets.size(),
           " value targets; fill exactly one of images and tokens with size * features values "
           "and exactly one of labels (class targets) and targets (value targets) with size * "
           "label_width");
  return features;
}

PackedInputs packed_layout(const std::vector<data::NamedInput>& inputs, int64_t rows) {
  PackedInputs layout;
  for (const data::NamedInput& input : inputs) {
    layout.offsets.push_back(layout.bytes);
    layout.bytes += round_up_64(static_cast<size_t>(rows) * input.example_bytes());
  }
  return layout;
}

void pack_inputs(const Shard& shard, const PackedInputs& layout, void* out) {
  auto* base = static_cast<uint8_t*>(out);
  for (size_t i = 0; i < shard.named->size(); ++i) {
    const data::NamedInput& input = (*shard.named)[i];
    const size_t row_bytes = input.example_bytes();
    std::memcpy(base + layout.offsets[i],
                input.bytes.data() + static_cast<size_t>(shard.first_row) * row_bytes,
                static_cast<size_t>(shard.rows) * row_bytes);
  }
}

uint64_t input_layout_key(const std::vector<data::NamedInput>& inputs) {
  uint64_t key = 1469598103934665603ull;  // FNV-1a over names, dtypes and shapes
  auto mix = [&key](uint64_t v) {
    key ^= v;
    key *= 1099511628211ull;
  };
  for (const data::NamedInput& input : inputs) {
    for (char c : input.name) mix(static_cast<unsigned char>(c));
    mix(0x100 + static_cast<uint64_t>(input.dtype));
    for (int64_t d : input.shape) mix(static_cast<uint64_t>(d) + 0x200);
    mix(0x300);
  }
  return key;
}

nn::Inputs inputs_of_rows(Tape& tape, const Tensor& uploaded, const Shard& shard, int64_t begin,
                          int64_t end) {
  if (shard.named == nullptr) {
    return nn::Inputs::single(
        tape.constant(uploaded.view(begin * shard.features, {end - begin, shard.features})));
  }
  const PackedInputs layout = packed_layout(*shard.named, shard.rows);
  nn::Inputs inputs;
  for (size_t i = 0; i < shard.named->size(); ++i) {
    const data::NamedInput& input = (*shard.named)[i];
    Shape shape{end - begin};
    shape.insert(shape.end(), input.shape.begin(), input.shape.end());
    const size_t at = layout.offsets[i] + static_cast<size_t>(begin) * input.example_bytes();
    inputs.add(input.name, tape.constant(uploaded.view_bytes(input.dtype, at, shape)));
  }
  return inputs;
}

void upload_shard(const Shard& shard, bool with_labels, Device device, Tensor& inputs,
                  Tensor& labels, Stream& stream) {
  // Named inputs arrive as the bytes of their packed copy (i32 words, viewed per input by
  // inputs_of_rows); images or tokens as [rows, features] of f32 or i32.
  const bool named = shard.named != nullptr;
  LS_ASSERT(!named || shard.packed != nullptr, "named inputs are uploaded from their packed copy");
  const Shape shape =
      named ? Shape{static_cast<int64_t>(packed_layout(*shard.named, shard.rows).bytes /
                                         sizeof(int32_t))}
            : Shape{shard.rows, shard.features};
  const DType input_type = named || shard.tokens != nullptr ? DType::kI32 : DType::kF32;
  if (!inputs.defined() || inputs.shape() != shape || inputs.dtype() != input_type ||
      labels.numel() != shard.rows * shard.label_width) {
    inputs = Tensor::empty(shape, input_type, device);
    labels = Tensor::empty({shard.rows * shard.label_width}, DType::kI32, device);
  }
  const void* host_inputs = named                     ? shard.packed
                            : shard.tokens != nullptr ? static_cast<const void*>(shard.tokens)
                                                      : static_cast<const void*>(shard.images);
  inputs.copy_from_host_async(host_inputs, inputs.nbytes(), stream);
  // Value targets travel in the same 4-byte words as labels; the loss views them as f32.
  if (with_labels) labels.copy_from_host_async(shard.target_words(), labels.nbytes(), stream);
}

}  // namespace ls
