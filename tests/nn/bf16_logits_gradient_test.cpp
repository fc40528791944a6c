// Note [A bf16 gradient for the logits] (engine/model/nn/functional.cpp): in bf16 the loss hands
// the LM head's linear its gradient already rounded to bf16. The parameter gradients must be bit
// for bit those of the f32 gradient rounded by the linear itself (the path before); logits with
// another recorded use get the gradient widened to f32 (exactly), so whatever else adds to it
// adds in f32, and the head multiplies the same bf16 numbers.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "ops/elementwise.h"
#include "ops/softmax_xent.h"
#include "tests/ops/op_test_util.h"

namespace ls::nn {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct Step {
  std::vector<float> grads;
  DType logits_grad = DType::kF32;
};

// A tiny GPT with its parameters (bf16 copy kept) on host:0, and 16 tokens 1 + (i * token_step) %
// 39, labelled 1 + (i * label_step) % 39; the context of a bf16 training step.
struct TinyBf16Gpt {
  std::unique_ptr<Stream> stream = device_runtime(kHost0).create_stream();
  Transformer model{config()};
  ParameterStore store{model, kHost0, *stream, 3};
  Tensor ids, labels;

  TinyBf16Gpt(int token_step, int label_step) {
    store.keep_bf16_copy(*stream);
    std::vector<int32_t> tokens, next;
    for (int i = 0; i < 16; ++i) {
      tokens.push_back(1 + (i * token_step) % 39);
      next.push_back(1 + (i * label_step) % 39);
    }
    ids = Tensor::from_host_i32(tokens, {2, 8}, kHost0, *stream);
    labels = Tensor::from_host_i32(next, {16}, kHost0, *stream);
  }
  static TransformerConfig config() {
    TransformerConfig c = gpt_config(2, 2, 16, 8, 40);
    c.ffn = 32;
    c.pad_id = 0;
    return c;
  }
  static ForwardContext bf16_training(bool logits_in_bf16) {
    ForwardContext context;
    context.training = true;
    context.precision = Precision::kBF16;
    context.logits_in_bf16 = logits_in_bf16;
    return context;
  }
};

// One bf16 forward and backward of a tiny GPT with a cross-entropy loss; `two_uses` records
// another op on the logits (scale, whose output is not used); `hand_over` false clears the
// linear's bf16_grad_ok first.
Step run(bool hand_over, bool two_uses) {
  TinyBf16Gpt gpt(7, 11);
  Tape tape(*gpt.stream);
  tape.set_context(TinyBf16Gpt::bf16_training(false));
  Var logits = gpt.model.forward(tape, tape.constant(gpt.ids));
  EXPECT_TRUE(logits->bf16_grad_ok) << "the tied head is a bf16 linear without a bias";
  if (!hand_over) logits->bf16_grad_ok = false;
  if (two_uses) scale(tape, logits, 2.0f);
  Var loss = cross_entropy(tape, logits, gpt.labels);
  gpt.store.zero_grad(*gpt.stream);
  tape.backward(loss);
  Step step{gpt.store.grads().to_host_f32(*gpt.stream), logits->grad.dtype()};
  gpt.stream->synchronize();
  return step;
}

TEST(Bf16LogitsGradient, TheHeadTakesItRoundedWithTheSameParameterGradients) {
  const Step handed = run(true, false), rounded_by_linear = run(false, false);
  EXPECT_EQ(handed.logits_grad, DType::kBF16);
  EXPECT_EQ(rounded_by_linear.logits_grad, DType::kF32);
  EXPECT_TRUE(test::bitwise_equal(handed.grads, rounded_by_linear.grads));
}

TEST(Bf16LogitsGradient, ASecondUseGetsItWidened) {
  const Step widened = run(true, true), handed = run(true, false);
  EXPECT_EQ(widened.logits_grad, DType::kF32);
  EXPECT_TRUE(test::bitwise_equal(widened.grads, handed.grads));
}

// With ForwardContext::logits_in_bf16 (the engine's bf16 cross-entropy step) the head writes the
// logits in bf16 only and the loss overwrites them with their bf16 gradient: the loss and the
// gradient are bit for bit softmax_xent's on those bf16 values widened to f32, the gradient then
// rounded.
TEST(Bf16LogitsGradient, Bf16LogitsAreReadOnceAndOverwrittenByTheirGradient) {
  TinyBf16Gpt gpt(5, 3);
  Stream& stream = *gpt.stream;
  const Tensor& y = gpt.labels;
  Tape tape(stream);
  tape.set_context(TinyBf16Gpt::bf16_training(true));
  Var logits = gpt.model.forward(tape, tape.constant(gpt.ids));
  ASSERT_EQ(logits->value.dtype(), DType::kBF16);
  Tensor widened = Tensor::empty(logits->value.shape(), DType::kF32, kHost0);
  cast(logits->value, widened, stream);  // before the loss overwrites them
  const float grad_scale = 1.0f / 16.0f;
  Var loss = cross_entropy(tape, logits, y, grad_scale);
  gpt.store.zero_grad(stream);
  tape.backward(loss);
  EXPECT_EQ(logits->grad.dtype(), DType::kBF16);
  EXPECT_EQ(logits->grad.data(), logits->value.data()) << "the gradient is written in place";

  Tensor expected_loss = Tensor::empty({1}, DType::kF32, kHost0);
  Tensor expected_grad = Tensor::empty(widened.shape(), DType::kF32, kHost0);
  ls::softmax_xent(widened, y, expected_loss, expected_grad, grad_scale, stream);
  Tensor grad = Tensor::empty(widened.shape(), DType::kF32, kHost0);
  cast(logits->grad, grad, stream);
  Tensor rounded = Tensor::empty(widened.shape(), DType::kF32, kHost0);
  cast(cast_to_bf16(expected_grad, stream), rounded, stream);
  EXPECT_TRUE(
      test::bitwise_equal(loss->value.to_host_f32(stream), expected_loss.to_host_f32(stream)));
  EXPECT_TRUE(test::bitwise_equal(grad.to_host_f32(stream), rounded.to_host_f32(stream)));
  stream.synchronize();
}

}  // namespace
}  // namespace ls::nn
