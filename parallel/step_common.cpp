// Shared step helpers (see parallel/step_common.h).
#include "parallel/step_common.h"

#include <array>

#include "parallel/process_group.h"

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

int64_t check_batch(const data::Batch& batch) {
  const size_t inputs = batch.tokens.empty() ? batch.images.size() : batch.tokens.size();
  const int64_t features = batch.features > 0 || batch.size <= 0
                               ? batch.features
                               : static_cast<int64_t>(inputs / static_cast<size_t>(batch.size));
  LS_CHECK(data::examples_fit(batch.size, features, batch.label_width, batch.images.size(),
                              batch.tokens.size(), batch.labels.size()),
           "malformed batch: ", batch.size, " examples of ", features, " features and ",
           batch.label_width, " label(s), but ", batch.images.size(), " float inputs, ",
           batch.tokens.size(), " token inputs and ", batch.labels.size(),
           " labels; fill exactly one of images and tokens with size * features values and "
           "labels with size * label_width");
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
  if (with_labels) labels.copy_from_host_async(shard.labels, labels.nbytes(), stream);
}

}  // namespace ls
