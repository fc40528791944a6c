// Losses (public): what the model's output is trained against, and the contract that makes N
// replicas train exactly as one replica with the N-times batch.
//
// The contract. A loss is a SUM of terms, one per target, each depending only on that target and
// the model's output for its example: Loss::sum(tape, output, targets) returns that sum over the
// rows it is given (a Var of one element), and the engine divides by the number of terms in the
// GLOBAL batch (class targets: the labels that are not -100; value targets: every value), counted
// on the host before the step. So every replica seeds its backward with loss scale / global count
// and the summed gradients are those of the mean over the global batch, whatever the split.
// A loss that averages over its rows instead, or mixes rows (a batch statistic), breaks this:
// its N-replica gradients differ from one replica's. DataParallel checks the contract at the first
// step of a custom loss: the sum over a replica's rows must equal the sums over two halves of them
// (relative 1e-4), else the step fails with a usage error naming the loss (see
// DataParallelOptions::check_loss_contract).
// Targets come from the batch: class targets from data::Batch::labels (i32), value targets from
// data::Batch::targets (f32); both are [rows, label_width] on the replica's device.
// Thread-safety: one Loss object is shared by every replica's thread: sum() must not mutate it.
#pragma once

#include <memory>
#include <string>

#include <lockstep/nn/autograd.h>

namespace ls::nn {

enum class TargetKind {
  kClasses,  // i32 class indices, -100 (PyTorch's ignore_index) for rows that do not count
  kValues,   // f32 values (regression targets, multi-label probabilities)
};

class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string name() const = 0;  // for messages: "mse"
  virtual TargetKind targets() const = 0;
  // The sum of the loss's terms over the rows of `output` ([rows, ...], the model's output) and
  // `targets` ([rows, label_width], i32 or f32 as targets() says): one element.
  virtual Var sum(Tape& tape, const Var& output, const Tensor& targets) const = 0;
};

// Softmax cross-entropy on class targets (the default). Its gradient is fused into the engine's
// step (computed with the forward pass): on a recording tape its sum() is an error; call
// nn::cross_entropy directly when writing a training loop of your own.
std::shared_ptr<const Loss> cross_entropy_loss();
// Squared error on value targets: sum of (output - target)^2 (the mean is PyTorch's MSELoss).
std::shared_ptr<const Loss> mse_loss();
// Binary cross-entropy on logits, value targets in [0, 1] (PyTorch's BCEWithLogitsLoss).
std::shared_ptr<const Loss> bce_with_logits_loss();

// Whether `loss` is the built-in cross-entropy, whose gradient the engine fuses.
bool is_cross_entropy(const Loss& loss);

}  // namespace ls::nn
