// The step ledger against the CUDA backend itself (LOCKSTEP_CUDA=EMULATED only): a tiny GPT's
// forward and backward on the emulated cuda:0, with a ledger recording. The launches the ops
// describe (ops/<family>.h) must be the kernels and cuBLAS calls the emulator saw, so a CUDA
// kernel added to an op, or launched outside the ops, fails here until its op describes it.
#include <gtest/gtest.h>

#include <lockstep/device.h>
#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "ops/op_ledger.h"

namespace ls {
namespace {

int64_t described_launches(Precision precision, int64_t* emulated) {
  const Device cuda0{DeviceKind::kCuda, 0};
  auto stream = device_runtime(cuda0).create_stream();
  nn::TransformerConfig config = nn::gpt_config(2, 2, 16, 8, 11);
  config.ffn = 32;
  config.pad_id = 0;
  nn::Transformer model(config);
  nn::ParameterStore store(model, cuda0, *stream, 5);
  if (precision == Precision::kBF16) store.keep_bf16_copy(*stream);
  std::vector<int32_t> tokens, labels;
  for (int i = 0; i < 16; ++i) {
    tokens.push_back(1 + i % 10);
    labels.push_back(1 + (i + 1) % 10);
  }
  const Tensor ids = Tensor::from_host_i32(tokens, {2, 8}, cuda0, *stream);
  const Tensor y = Tensor::from_host_i32(labels, {16}, cuda0, *stream);
  stream->synchronize();
  const int64_t before = cuda_emu::device_launches();
  OpLedger ledger({});
  {
    Tape tape(*stream);
    ForwardContext context;
    context.training = true;
    context.precision = precision;
    tape.set_context(context);
    Var loss = nn::cross_entropy(tape, model.forward(tape, tape.constant(ids)), y);
    store.zero_grad(*stream);
    tape.backward(loss);
  }
  stream->synchronize();
  *emulated = cuda_emu::device_launches() - before;
  int64_t described = 0;
  for (const LedgerRow& row : ledger.rows()) {
    EXPECT_TRUE(row.modelled) << row.op;
    described += row.count;
  }
  return described;
}

TEST(CudaEmulatorLedger, OpsDescribeTheLaunchesTheDeviceSees) {
  if (cuda_availability().device_count == 0) GTEST_SKIP() << "no emulated GPU";
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    int64_t emulated = 0;
    const int64_t described = described_launches(p, &emulated);
    EXPECT_GT(emulated, 0);
    EXPECT_EQ(described, emulated) << precision_name(p);
  }
}

}  // namespace
}  // namespace ls
