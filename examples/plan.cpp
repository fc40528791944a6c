// lockstep-plan: which parallel strategy a model needs on a machine. Builds the model from
// lockstep-train's model flags (gpt or mlp; no data set is read), measures its activations with
// two one-device training steps (parallel/planner.h: profile_model), measures the GEMM rate and
// the all-reduce bandwidth unless given, and prints per strategy the predicted bytes per device
// (parameters, gradients, optimizer state, activations, total), whether it fits, the predicted
// step time, and the recommendation with its reason. Usage errors exit 2, runtime errors 1.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <random>
#include <string>

#include "examples/cli_values.h"
#include "examples/plan_support.h"

namespace {

using ls::cli::UsageError;

struct PlanOptions {
  std::string model = "gpt";
  std::vector<int64_t> hidden;  // mlp: widths (default 256); gpt: {hidden} (default 256)
  int64_t layers = 4, heads = 4, seq = 128, vocab = 258;
  std::string devices = "auto";
  int64_t batch = 32, micro_batches = 4;
  std::string schedule = "1f1b", optimizer = "adamw", json_path;
  float momentum = 0.0f;
  double device_memory_gb = 0, gemm_gflops = 0, link_gbps = 0, bucket_mb = 25;
  bool help = false;
};

const char* usage() {
  return R"(usage: lockstep-plan [options]
Predicts the memory per device and step time of data parallel, ZeRO-1, ZeRO-2 and pipelines
for a model on a machine, and recommends the first that fits (in that order, 90% headroom).

  --model NAME          gpt (default) or mlp (784-hidden-10)
  --hidden W[,W...]     gpt: hidden size (default 256); mlp: hidden widths (default 256)
  --layers N, --heads N gpt blocks and heads (default 4, 4)
  --seq N, --vocab N    gpt tokens per example (default 128) and vocabulary (default 258)
  --devices SPEC        the devices to plan for (default auto)
  --batch N             global batch (default 32)
  --micro-batches M     pipeline micro-batches per step (default 4)
  --schedule NAME       pipeline schedule: 1f1b (default) or gpipe
  --optimizer NAME      adamw (default) or sgd (with --momentum X)
  --bucket-mb X         gradient bucket cap in MiB (default 25)
  --device-memory-gb X  memory per device (default for host devices: MemAvailable / devices)
  --gemm-gflops X       GEMM rate per device (default: measured, one sgemm)
  --link-gbps X         all-reduce bus bandwidth in GB/s (default: measured)
  --json PATH           write the plan as JSON
)";
}

PlanOptions parse(int argc, char** argv) {
  using ls::cli::parse_positive;
  PlanOptions o;
  ls::cli::parse_flags(
      argc, argv,
      {{"--model", [&](auto, auto v) { o.model = v; }},
       {"--hidden",
        [&](auto f, auto v) { o.hidden = ls::cli::parse_positive_list<int64_t>(f, v); }},
       {"--layers", [&](auto f, auto v) { o.layers = parse_positive<int64_t>(f, v); }},
       {"--heads", [&](auto f, auto v) { o.heads = parse_positive<int64_t>(f, v); }},
       {"--seq", [&](auto f, auto v) { o.seq = parse_positive<int64_t>(f, v); }},
       {"--vocab", [&](auto f, auto v) { o.vocab = parse_positive<int64_t>(f, v); }},
       {"--devices", [&](auto, auto v) { o.devices = v; }},
       {"--batch", [&](auto f, auto v) { o.batch = parse_positive<int64_t>(f, v); }},
       {"--micro-batches", [&](auto f, auto v) { o.micro_batches = parse_positive<int>(f, v); }},
       {"--schedule", [&](auto, auto v) { o.schedule = v; }},
       {"--optimizer", [&](auto, auto v) { o.optimizer = v; }},
       {"--momentum", [&](auto f, auto v) { o.momentum = ls::cli::parse_number<float>(f, v); }},
       {"--bucket-mb", [&](auto f, auto v) { o.bucket_mb = parse_positive<double>(f, v); }},
       {"--device-memory-gb",
        [&](auto f, auto v) { o.device_memory_gb = parse_positive<double>(f, v); }},
       {"--gemm-gflops", [&](auto f, auto v) { o.gemm_gflops = parse_positive<double>(f, v); }},
       {"--link-gbps", [&](auto f, auto v) { o.link_gbps = parse_positive<double>(f, v); }},
       {"--json", [&](auto, auto v) { o.json_path = v; }}},
      {{"--help", [&] { o.help = true; }}});
  if (o.model != "gpt" && o.model != "mlp") {
    throw UsageError("unknown model '" + o.model + "'; lockstep-plan knows gpt and mlp");
  }
  if (o.optimizer != "adamw" && o.optimizer != "sgd") {
    throw UsageError("unknown optimizer '" + o.optimizer + "'; use adamw or sgd");
  }
  if (o.vocab < 2) {
    throw UsageError("--vocab " + std::to_string(o.vocab) +
                     ": a vocabulary needs at least 2 "
                     "tokens (0 is padding)");
  }
  if (o.model == "gpt" && o.hidden.size() > 1) {
    throw UsageError("--hidden takes one width for --model gpt");
  }
  try {
    ls::parse_schedule(o.schedule);
  } catch (const ls::Error& e) {
    throw UsageError("--schedule: " + e.message());
  }
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
  PlanOptions o;
  std::vector<ls::Device> devices;
  try {
    o = parse(argc, argv);
    if (!o.help) devices = ls::cli::parse_devices_flag("--devices", o.devices);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "lockstep-plan: %s\n\n%s", e.what(), usage());
    return 2;
  }
  if (o.help) {
    std::printf("%s", usage());
    return 0;
  }
  try {
    const ls::ModelProfile model =
        plan_profile(plan_model(o), {o.optimizer, 1e-3f, o.momentum, 0.01f});
    const ls::MachineSpec spec =
        plan_machine({o.device_memory_gb, o.gemm_gflops, o.link_gbps}, devices);
    ls::PlanRequest request;
    request.global_batch = o.batch;
    request.micro_batches = static_cast<int>(o.micro_batches);
    request.schedule = ls::parse_schedule(o.schedule);
    request.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
    const ls::Plan plan = ls::plan_strategies(model, spec, request);
    print_plan(model, spec, request, plan);
    if (!o.json_path.empty()) write_plan_json(o.json_path, model, spec, plan);
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "lockstep-plan: %s\n", e.what());
    return 1;
  }
}
