// A transformer's forward and backward on fixed tokens, for tests that watch a training step from
// outside (the step ledger's tests): tokens 1 + i % 10, each labelled with the next, in
// `precision`. Header-only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>

namespace ls::test {

// Inputs of `batch` sequences of `seq` tokens on `device`, made before the step.
struct TinyBatch {
  Tensor ids, labels;
  TinyBatch(int64_t batch, int64_t seq, Device device, Stream& stream) {
    std::vector<int32_t> tokens, next;
    for (int64_t i = 0; i < batch * seq; ++i) {
      tokens.push_back(static_cast<int32_t>(1 + i % 10));
      next.push_back(static_cast<int32_t>(1 + (i + 1) % 10));
    }
    ids = Tensor::from_host_i32(tokens, {batch, seq}, device, stream);
    labels = Tensor::from_host_i32(next, {batch * seq}, device, stream);
  }
};

// One training forward and backward (gradients into the store's buffer); the loss Var.
inline Var tiny_step(nn::Transformer& model, nn::ParameterStore& store, const TinyBatch& batch,
                     Precision precision, Stream& stream) {
  Tape tape(stream);
  ForwardContext context;
  context.training = true;
  context.precision = precision;
  context.logits_in_bf16 = precision == Precision::kBF16;  // as the engine's step sets it
  tape.set_context(context);
  Var loss = nn::cross_entropy(tape, model.forward(tape, tape.constant(batch.ids)), batch.labels);
  store.zero_grad(stream);
  tape.backward(loss);
  return loss;
}

}  // namespace ls::test
