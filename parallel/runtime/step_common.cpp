// Shared step helpers (see parallel/runtime/step_common.h).
#include "parallel/runtime/step_common.h"

#include <array>

#include <lockstep/nn/functional.h>
#include "parallel/comm/process_group.h"

namespace ls {

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
    return e.message() + (e.context().empty() ? "" : " [" + e.context() + "]") + " (" + e.file() +
           ":" + std::to_string(e.line()) + ")";
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

void upload_shard(const Shard& shard, bool with_labels, Device device, Tensor& inputs,
                  Tensor& labels, Stream& stream) {
  const DType input_type = shard.tokens != nullptr ? DType::kI32 : DType::kF32;
  if (!inputs.defined() || inputs.dim(0) != shard.rows || inputs.dim(1) != shard.features ||
      inputs.dtype() != input_type || labels.numel() != shard.rows * shard.label_width) {
    inputs = Tensor::empty({shard.rows, shard.features}, input_type, device);
    labels = Tensor::empty({shard.rows * shard.label_width}, DType::kI32, device);
  }
  const void* host_inputs = shard.tokens != nullptr ? static_cast<const void*>(shard.tokens)
                                                    : static_cast<const void*>(shard.images);
  inputs.copy_from_host_async(host_inputs, inputs.nbytes(), stream);
  // Value targets travel in the same 4-byte words as labels; the loss views them as f32.
  if (with_labels) labels.copy_from_host_async(shard.target_words(), labels.nbytes(), stream);
}

}  // namespace ls
