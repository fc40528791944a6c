// The step ledger's recorder (ops/op_ledger.h) and time model (bench/ledger/ledger_model.h): a
// tiny GPT's forward and backward recorded on a host device, each op's count against what the
// model must launch (so a launch added or lost anywhere in the step fails here), every op with a
// cost description, a dry run recording what a real run launches, and the prices.
#include "ops/op_ledger.h"

#include <gtest/gtest.h>

#include <algorithm>

#include <map>

#include "bench/ledger/ledger_model.h"
#include "engine/core/runtime.h"
#include "engine/model/nn/parameter_store.h"
#include "engine/model/nn/transformer.h"
#include <lockstep/error.h>
#include <lockstep/nn/autograd.h>
#include <lockstep/nn/functional.h>
#include "ops/attention.h"
#include "ops/gemm.h"
#include "tests/nn/tiny_gpt_step.h"

namespace ls {
namespace {

const Device kHost0{DeviceKind::kHost, 0};

struct TinyGpt {
  int64_t layers = 2, batch = 2, seq = 8;
  nn::TransformerConfig config() const {
    nn::TransformerConfig c = nn::gpt_config(layers, 2, 16, seq, 11);
    c.ffn = 32;
    c.pad_id = 0;
    return c;
  }
};

// One forward and backward of the tiny GPT in `precision`, recorded by a ledger with `options`.
std::vector<LedgerRow> record_step(const TinyGpt& shape, Precision precision,
                                   OpLedger::Options options) {
  auto stream = device_runtime(kHost0).create_stream();
  const nn::TransformerConfig config = shape.config();
  nn::Transformer model(config);
  nn::ParameterStore store(model, kHost0, *stream, 5);
  if (precision == Precision::kBF16) store.keep_bf16_copy(*stream);
  const test::TinyBatch batch(shape.batch, shape.seq, kHost0, *stream);
  OpLedger ledger(options);
  test::tiny_step(model, store, batch, precision, *stream);
  stream->synchronize();
  return ledger.rows();
}

// Calls per (op, launch kernel), over every shape.
std::map<std::pair<std::string, std::string>, int64_t> counts_of(
    const std::vector<LedgerRow>& rows) {
  std::map<std::pair<std::string, std::string>, int64_t> counts;
  for (const LedgerRow& row : rows) counts[{row.op, row.launch.kernel}] += row.count;
  return counts;
}

TEST(OpLedger, CountsEveryLaunchOfAGptStepInF32) {
  for (int64_t layers : {1, 3}) {
    const TinyGpt shape{.layers = layers};
    const auto counts = counts_of(record_step(shape, Precision::kF32, {}));
    const int64_t l = layers;
    // Four linears a block (qkv, attention out, fc, fc out) and the tied head: forward, dx, dW.
    EXPECT_EQ((counts.at({"matmul", "cublasSgemm"})), 3 * (4 * l + 1)) << "layers " << l;
    // Two LayerNorms a block and the final one, forward and backward (backward: three launches).
    // A block's ln_2 takes the attention's residual add into its pass; the MLP's add, which the
    // next block's ln_1 reads, stays an add.
    EXPECT_EQ((counts.at({"layernorm", "layernorm_kernel"})), l + 1);
    EXPECT_EQ((counts.at({"add_layernorm", "layernorm_kernel"})), l);
    EXPECT_EQ((counts.at({"add", "add_kernel"})), l);
    for (const char* kernel : {"layernorm_param_grad_kernel", "layernorm_param_grad_finish_kernel",
                               "layernorm_input_grad_kernel"}) {
      EXPECT_EQ((counts.at({"layernorm_backward", kernel})), 2 * l + 1) << kernel;
    }
    // The attention scores' softmax and its backward, once a block.
    EXPECT_EQ((counts.at({"attention_softmax", "attention_softmax_kernel"})), l);
    EXPECT_EQ((counts.at({"attention_softmax_backward", "attention_softmax_backward_kernel"})), l);
    // One loss over the logits, two launches; the token embedding and its gradient.
    EXPECT_EQ((counts.at({"softmax_xent", "softmax_xent_kernel"})), 1);
    EXPECT_EQ((counts.at({"softmax_xent", "softmax_xent_loss_kernel"})), 1);
    EXPECT_EQ((counts.at({"embedding", "embedding_kernel"})), 1);
    EXPECT_EQ((counts.at({"embedding_backward", "embedding_chains_kernel"})), 1);
  }
}

TEST(OpLedger, CountsTheBf16StepsRoundedOperands) {
  const TinyGpt shape{.layers = 2};
  const auto counts = counts_of(record_step(shape, Precision::kBF16, {}));
  const int64_t l = 2;
  // The attention's two linears and the tied head multiply the bf16 weight copy with the cast
  // input: 3 products each, the linears' forward with the bias in its epilogue. The MLP (nn::mlp)
  // is two products with epilogues forward, one with dGELU's and three plain ones backward; no
  // bias + GELU pass either way, and no bias_add but the position embeddings' broadcast add.
  // The head's forward writes bf16 logits (ForwardContext::logits_in_bf16), through cuBLASLt too.
  EXPECT_EQ((counts.at({"matmul_bf16", "cublasGemmEx"})), 3 * (2 * l + 1) - 2 * l + 3 * l - 1);
  EXPECT_EQ((counts.at({"matmul_bf16_epilogue", "cublasLtMatmul"})), 2 * l + 3 * l + 1);
  EXPECT_EQ((counts.at({"bias_add", "bias_add_kernel"})), 1);
  EXPECT_EQ(counts.count({"matmul", "cublasSgemm"}), 0u);
  EXPECT_EQ(counts.count({"bias_gelu", "bias_gelu_kernel"}), 0u);
  EXPECT_EQ(counts.count({"bias_gelu_backward", "bias_gelu_backward_kernel"}), 0u);
}

TEST(OpLedger, EveryOpOfTheStepDescribesItsLaunches) {
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    for (const LedgerRow& row : record_step(TinyGpt{}, p, {})) {
      EXPECT_TRUE(row.modelled) << row.op << " has no cost description (ops/op_table.h)";
      EXPECT_GT(row.count, 0);
      EXPECT_GE(row.launch.bytes, 0);
    }
  }
}

TEST(OpLedger, ADryRunRecordsWhatARealRunLaunches) {
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    const auto real = record_step(TinyGpt{}, p, {});
    const auto dry = record_step(TinyGpt{}, p, {.dry_run = true, .plan_as = std::nullopt});
    ASSERT_EQ(real.size(), dry.size());
    for (size_t i = 0; i < real.size(); ++i) {
      EXPECT_EQ(real[i].op, dry[i].op);
      EXPECT_EQ(real[i].launch.kernel, dry[i].launch.kernel);
      EXPECT_EQ(real[i].launch.shape, dry[i].launch.shape);
      EXPECT_EQ(real[i].count, dry[i].count) << real[i].op;
    }
  }
}

TEST(OpLedger, PlanningAsCudaTakesCudasAttention) {
  // The host fuses bf16 attention from T = 256; CUDA has no fused kernel, so a ledger planning
  // as CUDA records the unfused softmax instead.
  const TinyGpt shape{.layers = 1, .batch = 1, .seq = 256};
  const auto host =
      counts_of(record_step(shape, Precision::kBF16, {.dry_run = true, .plan_as = std::nullopt}));
  const auto cuda = counts_of(
      record_step(shape, Precision::kBF16, {.dry_run = true, .plan_as = DeviceKind::kCuda}));
  const bool host_fuses = use_fused_attention(DeviceKind::kHost, 256, 8, Precision::kBF16);
  EXPECT_EQ(host.count({"attention_softmax", "attention_softmax_kernel"}), host_fuses ? 0u : 1u);
  EXPECT_EQ(cuda.count({"attention_softmax", "attention_softmax_kernel"}),
            use_fused_attention(DeviceKind::kCuda, 256, 8, Precision::kBF16) ? 0u : 1u);
}

TEST(OpLedger, OneRecordsAtATime) {
  OpLedger first({});
  EXPECT_EQ(active_op_ledger(), &first);
  EXPECT_THROW(OpLedger second({}), Error);
  EXPECT_EQ(active_op_ledger(), &first);
}

TEST(OpLedger, GemmDescriptionsCountBytesAndFlops) {
  const Launch f32 =
      ledger::gemm("g", false, true, 4, 6, 8, 1, 4, 4, 4, false, LaunchRate::kF32Math);
  EXPECT_EQ(f32.shape, "4x6x8 NT");
  EXPECT_DOUBLE_EQ(f32.flops, 2.0 * 4 * 6 * 8);
  EXPECT_DOUBLE_EQ(f32.bytes, 4.0 * (4 * 8 + 8 * 6 + 4 * 6));
  const Launch batched =
      ledger::gemm("g", true, false, 4, 6, 8, 3, 2, 2, 4, true, LaunchRate::kTensorCore);
  EXPECT_EQ(batched.shape, "4x6x8 TN x3");
  EXPECT_DOUBLE_EQ(batched.bytes, 3 * (2.0 * 4 * 8 + 2.0 * 8 * 6 + 8.0 * 4 * 6));
  // f32 operands in bf16 precision: two rounding launches, then the 16-bit product.
  const OpLaunches launches =
      detail::gemm_launches(false, false, {4, 6, 8}, 1, false, Precision::kBF16, 0.0f);
  ASSERT_EQ(launches.size(), 3u);
  EXPECT_EQ(launches[0].kernel, "round_operand_kernel");
  EXPECT_DOUBLE_EQ(launches[0].bytes, 6.0 * 4 * 8);
  EXPECT_EQ(launches[2].rate, LaunchRate::kTensorCore);
}

TEST(LedgerModel, ALaunchTakesItsLongerBoundAndNoLessThanTheFloor) {
  const ledger::GpuRates h100 = ledger::gpu_rates("h100");
  const Launch gemm{"g", "", LaunchRate::kTensorCore, 1e6, 8e12};
  EXPECT_DOUBLE_EQ(ledger::launch_seconds(gemm, h100), 8e12 / 800e12);
  const Launch copy{"c", "", LaunchRate::kMemory, 2.68e9, 1e15};  // memory ignores flops
  EXPECT_DOUBLE_EQ(ledger::launch_seconds(copy, h100), 2.68e9 / (0.8 * 3.35e12));
  const Launch tiny{"t", "", LaunchRate::kMemory, 8, 0};
  EXPECT_DOUBLE_EQ(ledger::launch_seconds(tiny, h100), ledger::kLaunchFloorUs * 1e-6);
  EXPECT_GT(ledger::gpu_rates("h200").bytes_per_s, h100.bytes_per_s);
  EXPECT_THROW(ledger::gpu_rates("a100"), Error);
}

TEST(LedgerModel, PredictionAddsTheRowsLongestFirst) {
  const ledger::GpuRates h200 = ledger::gpu_rates("h200");
  std::vector<LedgerRow> rows{{"a", Launch{"k1", "", LaunchRate::kMemory, 3.84e9, 0}, 2, true},
                              {"b", Launch{"k2", "", LaunchRate::kTensorCore, 0, 80e12}, 1, true},
                              {"c", Launch{"k3", "", LaunchRate::kMemory, 0, 0}, 1, false}};
  const ledger::StepPrediction p = ledger::predict(rows, h200);
  EXPECT_EQ(p.launches, 4);
  EXPECT_EQ(p.unmodelled_ops, 1);
  ASSERT_EQ(p.rows.size(), 3u);
  EXPECT_EQ(p.rows[0].row.op, "b");  // 0.1 s
  EXPECT_DOUBLE_EQ(p.rows[1].seconds, 2 * 3.84e9 / (0.8 * 4.8e12));
  EXPECT_DOUBLE_EQ(p.step_seconds, 0.1 + 2 * 3.84e9 / (0.8 * 4.8e12) + 3e-6);
}

}  // namespace
}  // namespace ls

namespace ls {
namespace {

// A timed ledger marks every op call on the step's stream: each (op, first launch) it measured is
// a row the ledger counted as often, its time is a device time (>= 0) and the step's calls sum
// to a positive time. A dry run has nothing to time.
TEST(OpLedger, ATimedLedgerTimesEveryCallOfTheStep) {
  for (Precision p : {Precision::kF32, Precision::kBF16}) {
    auto stream = device_runtime(kHost0).create_stream();
    const TinyGpt shape;
    nn::Transformer model(shape.config());
    nn::ParameterStore store(model, kHost0, *stream, 5);
    if (p == Precision::kBF16) store.keep_bf16_copy(*stream);
    const test::TinyBatch batch(shape.batch, shape.seq, kHost0, *stream);
    OpLedger ledger({.plan_as = std::nullopt, .timed = true});
    test::tiny_step(model, store, batch, p, *stream);
    const std::vector<MeasuredRow> measured = ledger.measured();
    const std::vector<LedgerRow> rows = ledger.rows();
    ASSERT_FALSE(measured.empty());
    double total = 0;
    for (const MeasuredRow& m : measured) {
      const auto row = std::find_if(rows.begin(), rows.end(), [&](const LedgerRow& r) {
        return r.op == m.op && r.launch.kernel == m.launch.kernel &&
               r.launch.shape == m.launch.shape;
      });
      ASSERT_NE(row, rows.end()) << m.op << " " << m.launch.kernel;
      EXPECT_EQ(row->count, m.calls) << m.op << " " << m.launch.kernel << " " << m.launch.shape;
      EXPECT_GE(m.seconds, 0.0);
      EXPECT_GE(m.launch.bytes, row->launch.bytes * static_cast<double>(m.calls));
      total += m.seconds;
    }
    EXPECT_GT(total, 0.0);
  }
  EXPECT_THROW(OpLedger({.dry_run = true, .plan_as = std::nullopt, .timed = true}), Error);
}

}  // namespace
}  // namespace ls
