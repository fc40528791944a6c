// lockstep-step-ledger: what one training step of a GPT launches on a GPU (every kernel and GEMM
// with its count, bytes moved and FLOPs), priced at achievable rates on an H100 or H200, with the
// step time and MFU they predict. No GPU needed: the step runs on one host device as a dry run
// (the ops record their launches and enqueue nothing) making the choices the CUDA backend makes
// (ops/op_ledger.h). Measured numbers always win over it; it shows progress between GPU runs.
// Default shape: GPT-2 124M (12 x 768, 12 heads, seq 1024, vocabulary 50,257), batch 16.
// --measure DEVICE (on a GPU machine: gpu-check's step-ledger step) also runs the step there and
// prints each op's measured time beside its ledger price, as TFLOP/s or GB/s and as a share of
// the ceilings measured in the same process; then checks that the step repeats bit for bit.
#include <algorithm>
#include <cstdio>
#include <string>

#include "bench/ledger/ledger_model.h"
#include "bench/ledger/measure.h"
#include "bench/micro/bench_util.h"
#include "ops/op_ledger.h"
#include "programs/common/cli.h"
#include <lockstep/data_parallel.h>
#include <lockstep/json.h>

namespace ls {
namespace {

struct LedgerFlags {
  std::string precision = "bf16";
  std::string gpu = "h100";
  int64_t layers = 12, heads = 12, hidden = 768, seq = 1024, vocab = 50257, batch = 16;
  std::string json;
  std::string measure;  // a device: time the step there too
  int64_t ceiling_gemm = 8192, ceiling_copy_mb = 1024;
};

// The ops of the second step (the first may set up what later steps reuse).
std::vector<LedgerRow> record_step(const nn::TransformerConfig& config, int64_t batch,
                                   Precision precision) {
  OpLedger ledger({.dry_run = true, .plan_as = DeviceKind::kCuda});
  DataParallelOptions options;
  options.precision = precision;
  options.graphs = false;  // a graph replays the same launches; the host's replays are not recorded
  options.notice = [](const std::string&) {};
  DataParallel trainer({Device{DeviceKind::kHost, 0}}, transformer_factory(config),
                       make_optimizer_factory({}), options);
  const data::Batch tokens =
      bench::random_tokens(batch, config.max_seq, static_cast<int32_t>(config.vocab));
  trainer.step(tokens);
  ledger.clear();
  trainer.step(tokens);
  return ledger.rows();
}

std::string fixed(double value, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

void print_table(const ledger::StepPrediction& p) {
  std::printf("%-28s %-34s %-26s %6s %10s %10s %9s %6s\n", "op", "launch", "shape", "count",
              "MB/call", "GFLOP/call", "ms", "share");
  for (const ledger::PricedRow& r : p.rows) {
    const Launch& l = r.row.launch;
    std::printf("%-28s %-34s %-26s %6lld %10s %10s %9s %5s%%\n", r.row.op.c_str(), l.kernel.c_str(),
                l.shape.c_str(), static_cast<long long>(r.row.count),
                fixed(l.bytes / 1e6, 2).c_str(), fixed(l.flops / 1e9, 2).c_str(),
                fixed(r.seconds * 1e3, 3).c_str(),
                fixed(100 * r.seconds / p.step_seconds, 1).c_str());
  }
}

void write_json(const std::string& path, const ledger::StepPrediction& p, double mfu) {
  JsonWriter w;
  w.begin_object().key("rows").begin_array();
  for (const ledger::PricedRow& r : p.rows) {
    const Launch& l = r.row.launch;
    w.begin_object()
        .field("op", r.row.op)
        .field("launch", l.kernel)
        .field("shape", l.shape)
        .field("rate", launch_rate_name(l.rate))
        .field("count", r.row.count)
        .field("bytes_per_call", l.bytes)
        .field("flops_per_call", l.flops)
        .field("ms", r.seconds * 1e3)
        .field("modelled", r.row.modelled)
        .end_object();
  }
  w.end_array()
      .field("launches", p.launches)
      .field("unmodelled_ops", p.unmodelled_ops)
      .field("step_ms", p.step_seconds * 1e3)
      .field("mfu", mfu)
      .end_object();
  w.write_file(path);
}

// --measure: every op call of the step timed on the device, beside the ceilings measured there;
// then the step run again from the same start. Returns 1 when the two runs differ.
int measure(const LedgerFlags& flags, const nn::TransformerConfig& config, Precision precision,
            const ledger::GpuRates& rates, double model_flops) {
  const std::vector<Device> devices = parse_devices(flags.measure);
  LS_CHECK(devices.size() == 1, "--measure: '", flags.measure, "' names ", devices.size(),
           " devices; name one (cuda:0)");
  const Device device = devices.front();
  const ledger::Ceilings ceilings =
      ledger::measure_ceilings(device, flags.ceiling_gemm, flags.ceiling_copy_mb << 20);
  std::printf(
      "\nmeasured on %s: ceilings %.1f TFLOP/s (bf16 product %lld^3, cuBLASLt), %.1f GB/s "
      "(copy, bytes read + written)\n",
      device.str().c_str(), ceilings.gemm_flops_per_s / 1e12,
      static_cast<long long>(flags.ceiling_gemm), ceilings.copy_bytes_per_s / 1e9);
  constexpr int kSteps = 3;
  const ledger::MeasuredStep first =
      ledger::measure_step(config, flags.batch, precision, device, kSteps);
  std::vector<MeasuredRow> rows = first.rows;
  std::stable_sort(rows.begin(), rows.end(), [](const MeasuredRow& a, const MeasuredRow& b) {
    return a.seconds > b.seconds;
  });
  double timed = 0;
  for (const MeasuredRow& r : rows) timed += r.seconds;
  std::printf("%-28s %-34s %-26s %6s %9s %9s %9s %8s %6s %8s %6s\n", "op", "first launch", "shape",
              "calls", "ms", "us/call", "ledger", "TFLOP/s", "%gemm", "GB/s", "%copy");
  for (const MeasuredRow& r : rows) {
    const double calls = static_cast<double>(r.calls);
    Launch per_call = r.launch;
    per_call.bytes /= calls;
    per_call.flops /= calls;
    const double predicted = calls * ledger::launch_seconds(per_call, rates);
    const double flops = r.launch.flops / r.seconds, bytes = r.launch.bytes / r.seconds;
    const bool math = r.launch.rate != LaunchRate::kMemory;
    std::printf("%-28s %-34s %-26s %6lld %9s %9s %9s %8s %6s %8s %6s\n", r.op.c_str(),
                r.launch.kernel.c_str(), r.launch.shape.c_str(), static_cast<long long>(r.calls),
                fixed(r.seconds * 1e3, 3).c_str(), fixed(r.seconds / calls * 1e6, 1).c_str(),
                fixed(predicted * 1e3, 3).c_str(), math ? fixed(flops / 1e12, 1).c_str() : "",
                math ? fixed(100 * flops / ceilings.gemm_flops_per_s, 0).c_str() : "",
                fixed(bytes / 1e9, 0).c_str(),
                math ? "" : fixed(100 * bytes / ceilings.copy_bytes_per_s, 0).c_str());
  }
  const double tokens = static_cast<double>(flags.batch * flags.seq);
  std::printf(
      "\nmeasured: step %.1f ms (host clock; op calls %.1f ms), %.0f tokens/s, MFU %.3f "
      "(eager, one device)\n",
      first.step_seconds * 1e3, timed * 1e3, tokens / first.step_seconds,
      model_flops / (first.step_seconds * rates.peak_bf16_flops));
  const ledger::MeasuredStep second =
      ledger::measure_step(config, flags.batch, precision, device, kSteps);
  const bool same_losses = first.losses == second.losses;
  const bool same_hash = first.parameter_hash == second.parameter_hash;
  std::printf(
      "repeat: two runs of %d steps from the same start: losses %s (last %.9g, %.9g), "
      "parameter CRC-32 %08x %s %08x\n",
      kSteps, same_losses ? "equal" : "DIFFER", first.losses.back(), second.losses.back(),
      static_cast<unsigned>(first.parameter_hash),
      same_hash ? "==" : "!=", static_cast<unsigned>(second.parameter_hash));
  return same_losses && same_hash ? 0 : 1;
}

int run(const LedgerFlags& flags) {
  const std::optional<Precision> precision = parse_precision(flags.precision);
  LS_CHECK(precision.has_value(), "--precision: unknown precision '", flags.precision,
           "'; use f32, bf16 or f16");
  const ledger::GpuRates rates = ledger::gpu_rates(flags.gpu);
  nn::TransformerConfig config =
      nn::gpt_config(flags.layers, flags.heads, flags.hidden, flags.seq, flags.vocab);
  // The byte vocabulary's pad id (256) means nothing to a language model's loss; keep it inside
  // a small vocabulary.
  config.pad_id = static_cast<int32_t>(std::min<int64_t>(config.pad_id, flags.vocab - 1));
  config.validate();
  const ledger::StepPrediction p =
      ledger::predict(record_step(config, flags.batch, *precision), rates);
  const double tokens = static_cast<double>(flags.batch * flags.seq);
  const double model_flops = tokens * config.train_flops_per_token(flags.seq);
  const double mfu = model_flops / (p.step_seconds * rates.peak_bf16_flops);
  std::printf(
      "step ledger: %s, batch %lld, %s, on %s (GEMMs %.0f TFLOP/s, f32 %.1f TFLOP/s, "
      "fused attention %.0f TFLOP/s, memory %.2f TB/s, each launch >= %.0f us)\n\n",
      config.describe().c_str(), static_cast<long long>(flags.batch), precision_name(*precision),
      rates.name.c_str(), rates.tensor_flops / 1e12, rates.f32_flops / 1e12,
      rates.attention_flops / 1e12, rates.bytes_per_s / 1e12, ledger::kLaunchFloorUs);
  if (!built_with_cuda()) {
    std::printf("note: this build has no CUDA backend, so the CUDA kernels' own choices (fused "
                "attention) are unknown to it and the unfused ops are recorded instead; build with "
                "the CUDA toolkit for the ledger of the CUDA step\n\n");
  }
  print_table(p);
  std::printf("\n%lld launches, %.1f GB moved, %.2f TFLOP launched (model: %.2f TFLOP)\n",
              static_cast<long long>(p.launches), p.bytes / 1e9, p.flops / 1e12,
              model_flops / 1e12);
  if (p.unmodelled_ops > 0) {
    std::printf("%lld op calls have no cost description (priced at the launch floor)\n",
                static_cast<long long>(p.unmodelled_ops));
  }
  if (!flags.json.empty()) write_json(flags.json, p, mfu);
  std::printf("predicted: step %.1f ms, MFU %.3f\n", p.step_seconds * 1e3, mfu);
  if (!flags.measure.empty()) return measure(flags, config, *precision, rates, model_flops);
  return 0;
}

}  // namespace
}  // namespace ls

int main(int argc, char** argv) {
  ls::LedgerFlags flags;
  CLI::App app{"lockstep-step-ledger: a GPT training step's GPU launches, priced (no GPU needed)"};
  app.add_option("--precision", flags.precision, "f32, bf16 or f16")
      ->capture_default_str()
      ->check(ls::cli::one_of({"f32", "bf16", "f16"}, "precision"));
  app.add_option("--gpu", flags.gpu, "h100 or h200: whose rates price the launches")
      ->capture_default_str()
      ->check(ls::cli::one_of({"h100", "h200"}, "GPU"));
  app.add_option("--layers", flags.layers)->capture_default_str()->check(ls::cli::positive());
  app.add_option("--heads", flags.heads)->capture_default_str()->check(ls::cli::positive());
  app.add_option("--hidden", flags.hidden)->capture_default_str()->check(ls::cli::positive());
  app.add_option("--seq", flags.seq)->capture_default_str()->check(ls::cli::positive());
  app.add_option("--vocab", flags.vocab)->capture_default_str()->check(ls::cli::positive());
  app.add_option("--batch", flags.batch, "sequences a step")
      ->capture_default_str()
      ->check(ls::cli::positive());
  app.add_option("--json", flags.json, "also write the ledger as JSON to this file");
  app.add_option("--measure", flags.measure,
                 "also run the step on this device (cuda:0) and time every op call there, beside "
                 "the ceilings measured there, then run it again to check it repeats");
  app.add_option("--ceiling-gemm", flags.ceiling_gemm, "side of the bf16 ceiling product")
      ->capture_default_str()
      ->check(ls::cli::positive());
  app.add_option("--ceiling-copy-mb", flags.ceiling_copy_mb, "MiB of the ceiling copy")
      ->capture_default_str()
      ->check(ls::cli::positive());
  if (const std::optional<int> exit = ls::cli::parse(app, argc, argv)) return *exit;
  try {
    return ls::run(flags);
  } catch (const std::exception& e) {
    std::fflush(stdout);  // the table so far first, then the error
    std::fprintf(stderr, "lockstep-step-ledger: %s\n", e.what());
    return ls::cli::exit_code_of(e);
  }
}
