// The step ledger against the CUDA backend itself (LOCKSTEP_CUDA=EMULATED only): a tiny GPT's
// forward and backward on the emulated cuda:0, with a ledger recording. The launches the ops
// describe (ops/<family>.h) must be the kernels and cuBLAS calls the emulator saw, so a CUDA
// kernel added to an op, or launched outside the ops, fails here until its op describes it.
// Head dim 16, so bf16 takes CUDA's packed fused attention and f32 the unfused ops; the loss and
// gradients are checked against the same step on the host (bf16 emulated there too).
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include <lockstep/device.h>
#include "engine/core/cuda_emulator/emulator.h"
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "ops/op_ledger.h"
#include "tests/nn/tiny_gpt_step.h"

namespace ls {
namespace {

struct StepResult {
  int64_t described = 0, emulated = 0;
  float loss = 0;
  std::vector<float> grads;
};

StepResult run_step(Device device, Precision precision, bool record) {
  auto stream = device_runtime(device).create_stream();
  nn::TransformerConfig config = nn::gpt_config(2, 2, 32, 8, 11);
  config.ffn = 32;
  config.pad_id = 0;
  nn::Transformer model(config);
  nn::ParameterStore store(model, device, *stream, 5);
  if (precision == Precision::kBF16) store.keep_bf16_copy(*stream);
  const test::TinyBatch batch(2, 8, device, *stream);
  stream->synchronize();
  StepResult result;
  const int64_t before = cuda_emu::device_launches();
  std::optional<OpLedger> ledger;
  if (record) ledger.emplace(OpLedger::Options{});
  result.loss = test::tiny_step(model, store, batch, precision, *stream)->value.to_host_f32(*stream)[0];
  result.grads = store.grads().to_host_f32(*stream);
  stream->synchronize();
  result.emulated = cuda_emu::device_launches() - before;
  if (ledger) {
    for (const LedgerRow& row : ledger->rows()) {
      EXPECT_TRUE(row.modelled) << row.op;
      if (row.op != "copy") result.described += row.count;  // copies are not kernels here
    }
  }
  return result;
}

TEST(CudaEmulatorLedger, OpsDescribeTheLaunchesTheDeviceSees) {
  if (cuda_availability().device_count == 0) GTEST_SKIP() << "no emulated GPU";
  const Device cuda0{DeviceKind::kCuda, 0}, host0{DeviceKind::kHost, 0};
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    SCOPED_TRACE(precision_name(p));
    const StepResult cuda = run_step(cuda0, p, true);
    EXPECT_GT(cuda.emulated, 0);
    EXPECT_EQ(cuda.described, cuda.emulated);
    // The same step on the host: the two backends compute the same function.
    const StepResult host = run_step(host0, p, false);
    const double tolerance = p == Precision::kF32 ? 1e-4 : 2e-2;
    EXPECT_NEAR(cuda.loss, host.loss, tolerance * std::abs(host.loss));
    // Gradients: relative L2 distance (bf16 rounds P and dS at other points on the two backends:
    // elementwise, a small gradient may differ by more than its size).
    double diff = 0, norm = 0;
    for (size_t i = 0; i < host.grads.size(); ++i) {
      diff += std::pow(static_cast<double>(cuda.grads[i]) - host.grads[i], 2);
      norm += std::pow(static_cast<double>(host.grads[i]), 2);
    }
    EXPECT_LT(std::sqrt(diff / norm), p == Precision::kF32 ? 1e-5 : 1e-2);
  }
}

}  // namespace
}  // namespace ls
