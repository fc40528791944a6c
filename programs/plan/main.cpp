// lockstep-plan: which parallel strategy a model needs on a machine. Builds the model from
// lockstep-train's model flags (gpt or mlp; no data set is read), measures its activations with
// two one-device training steps (lockstep/planner.h: profile_model), measures the GEMM rate and
// the all-reduce bandwidth unless given, and prints per strategy the predicted bytes per device
// (parameters, gradients, optimizer state, activations, total), whether it fits, the predicted
// step time, and the recommendation with its reason. Usage errors exit 2, runtime errors 1.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <random>
#include <string>
#include <variant>
#include <vector>

#include "programs/common/cli.h"
#include "programs/common/flags.h"
#include "programs/common/plan_support.h"

namespace {

using ls::cli::UsageError;

struct PlanOptions : ls::cli::ModelShapeFlags,
                     ls::cli::OptimizerFlags,
                     ls::cli::PipelineScheduleFlags,
                     MachineFlags {
  std::string model = "gpt";
  int64_t vocab = 258;
  std::string devices = "auto";
  int64_t batch = 32;
  double bucket_mb = 25;
  bool choose_buckets = true;  // no --bucket-mb: the planner chooses each strategy's cap
  std::string json_path;
};

constexpr const char* kDescription =
    "Predicts the memory per device and step time of data parallel, ZeRO-1, ZeRO-2 and "
    "pipelines for a model on a machine, and recommends the first that fits (in that order, 90% "
    "headroom).";

// The options, or the exit code to return at once (0 after --help, 2 after a usage error).
std::variant<PlanOptions, int> parse(int argc, char** argv) {
  PlanOptions o;
  CLI::App app(kDescription, "lockstep-plan");
  app.footer("Exit codes: 0 success, 1 runtime failure, 2 usage error.");
  ls::cli::add_model(app, o.model, {"gpt", "mlp"});
  ls::cli::add_model_shape(app, o, "default 256 for both");
  app.add_option("--vocab", o.vocab, "gpt vocabulary (token 0 pads)")
      ->capture_default_str()->check(ls::cli::in_range(2, 1 << 30))->group("Model");
  ls::cli::add_devices(app, o.devices);
  app.add_option("--batch", o.batch, "global batch")
      ->capture_default_str()->check(ls::cli::positive())->group("Training");
  ls::cli::add_optimizer_kind(app, o);
  ls::cli::add_pipeline_schedule(app, o);
  ls::cli::add_bucket_mb(app, o.bucket_mb);
  ls::cli::add_device_memory(app, o.device_memory_gb);
  app.add_option("--gemm-gflops", o.gemm_gflops, "GEMM rate per device (default: measured, one sgemm)")
      ->check(ls::cli::positive())->group("Machine");
  app.add_option("--link-gbps", o.link_gbps, "all-reduce bus bandwidth in GB/s (default: measured)")
      ->check(ls::cli::positive())->group("Machine");
  ls::cli::add_json(app, o.json_path);
  if (const std::optional<int> exit_code = ls::cli::parse(app, argc, argv)) return *exit_code;
  o.choose_buckets = app.count("--bucket-mb") == 0;
  if (o.model == "gpt" && o.hidden.size() > 1)
    return ls::cli::usage_error(app, "--hidden takes one width for --model gpt");
  return o;
}

ls::nn::TransformerConfig gpt_config(const PlanOptions& o, int64_t layers) {
  ls::nn::TransformerConfig c =
      ls::nn::gpt_config(layers, o.heads, o.hidden.empty() ? 256 : o.hidden[0], o.seq, o.vocab);
  c.pad_id = 0;
  c.validate();
  return c;
}

ls::data::Batch random_batch(const PlanOptions& o, int64_t features, int64_t rows) {
  std::mt19937 rng(7);
  ls::data::Batch b;
  b.size = rows;
  b.features = features;
  if (o.model == "gpt") {
    b.label_width = features;
    for (int64_t i = 0; i < rows * features; ++i) {
      b.tokens.push_back(1 + static_cast<int32_t>(rng() % static_cast<uint32_t>(o.vocab - 1)));
      b.labels.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(o.vocab)));
    }
    return b;
  }
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < rows * features; ++i) b.images.push_back(normal(rng));
  for (int64_t i = 0; i < rows; ++i) b.labels.push_back(static_cast<int32_t>(rng() % 10));
  return b;
}

PlanModel plan_model(const PlanOptions& o) {
  PlanModel m;
  if (o.model == "gpt") {
    m.transformer = gpt_config(o, o.layers);
    m.model = ls::transformer_factory(*m.transformer);
    m.batch = [&o](int64_t rows) { return random_batch(o, o.seq, rows); };
    m.description = m.transformer->describe();
    return m;
  }
  m.mlp_widths = {784};
  for (int64_t w : o.hidden.empty() ? std::vector<int64_t>{256} : o.hidden) {
    m.mlp_widths.push_back(w);
  }
  m.mlp_widths.push_back(10);
  m.model = ls::mlp_factory(m.mlp_widths);
  m.batch = [&o](int64_t rows) { return random_batch(o, 784, rows); };
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  std::variant<PlanOptions, int> parsed = parse(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  const PlanOptions& o = std::get<PlanOptions>(parsed);
  const std::optional<std::vector<ls::Device>> devices =
      ls::cli::devices_or_usage_error("lockstep-plan", o.devices);
  if (!devices) return ls::cli::kUsageExit;
  try {
    const ls::ModelProfile model =
        plan_profile(plan_model(o), {o.optimizer, 1e-3f, o.momentum, 0.01f});
    const ls::MachineSpec spec =
        plan_machine(o, *devices);
    ls::PlanRequest request;
    request.global_batch = o.batch;
    request.micro_batches = static_cast<int>(o.micro_batches);
    request.schedule = ls::parse_schedule(o.schedule);
    request.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
    request.choose_buckets = o.choose_buckets;
    const ls::Plan plan = ls::plan_strategies(model, spec, request);
    print_plan(model, spec, request, plan);
    if (!o.json_path.empty()) write_plan_json(o.json_path, model, spec, plan);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-plan: error: %s\n", e.what());
    return ls::cli::exit_code_of(e);
  }
}
