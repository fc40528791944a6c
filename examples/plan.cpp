// lockstep-plan: which parallel strategy a model needs on a machine. Builds the model from
// lockstep-train's model flags (gpt or mlp; no data set is read), measures its activations with
// two one-device training steps (parallel/planner.h: profile_model), measures the GEMM rate and
// the all-reduce bandwidth unless given, and prints per strategy the predicted bytes per device
// (parameters, gradients, optimizer state, activations, total), whether it fits, the predicted
// step time, and the recommendation with its reason. Usage errors exit 2, runtime errors 1.
#include <lockstep/lockstep.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>

#include "examples/cli_values.h"

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
       {"--micro-batches",
        [&](auto f, auto v) { o.micro_batches = parse_positive<int64_t>(f, v); }},
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

ls::ModelProfile profile(const PlanOptions& o) {
  ls::ProbeOptions probe;
  probe.optimizer = {o.optimizer, 1e-3f, o.momentum, 0.01f};
  if (o.model == "gpt") {
    const ls::nn::TransformerConfig c = gpt_config(o, o.layers);
    probe.batch = [&o](int64_t rows) { return random_batch(o, o.seq, rows); };
    probe.train_flops_per_example = c.train_flops_per_token(o.seq) * static_cast<double>(o.seq);
    probe.boundary_bytes_per_example = 4.0 * static_cast<double>(c.hidden * o.seq);
    if (o.layers > 2) {
      probe.with_layers = [&o](int64_t l) { return ls::transformer_factory(gpt_config(o, l)); };
      probe.layers = o.layers;
    }
    ls::ModelProfile m = ls::profile_model(ls::transformer_factory(c), probe);
    m.description = c.describe();
    return m;
  }
  std::vector<int64_t> widths = {784};
  for (int64_t w : o.hidden.empty() ? std::vector<int64_t>{256} : o.hidden) widths.push_back(w);
  widths.push_back(10);
  probe.batch = [&o](int64_t rows) { return random_batch(o, 784, rows); };
  int64_t params = 0, widest = 0;
  for (size_t i = 1; i < widths.size(); ++i) {
    params += widths[i - 1] * widths[i] + widths[i];
    widest = std::max(widest, widths[i]);
  }
  probe.train_flops_per_example = 6.0 * static_cast<double>(params);
  probe.boundary_bytes_per_example = 4.0 * static_cast<double>(widest);
  ls::ModelProfile m = ls::profile_model(ls::mlp_factory(widths), probe);
  m.description = "mlp " + std::to_string(params) + " parameters";
  return m;
}

int64_t mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024;
  }
  LS_CHECK(false, "cannot read MemAvailable from /proc/meminfo; give --device-memory-gb");
  return 0;
}

ls::MachineSpec machine(const PlanOptions& o, const std::vector<ls::Device>& devices) {
  ls::MachineSpec m;
  m.devices = static_cast<int>(devices.size());
  if (o.device_memory_gb > 0) {
    m.device_bytes = static_cast<int64_t>(o.device_memory_gb * 1e9);
  } else {
    LS_CHECK(devices[0].kind == ls::DeviceKind::kHost,
             "give --device-memory-gb for CUDA devices (not measured yet)");
    m.device_bytes = mem_available_bytes() / m.devices;
  }
  m.gemm_flops = o.gemm_gflops > 0 ? o.gemm_gflops * 1e9 : ls::measure_gemm_flops(devices[0]);
  m.link_bytes_per_s = o.link_gbps > 0 ? o.link_gbps * 1e9 : ls::measure_all_reduce_busbw(devices);
  return m;
}

double mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

void print_plan(const ls::ModelProfile& model, const ls::MachineSpec& spec,
                const ls::PlanRequest& request, const ls::Plan& plan) {
  std::printf("model: %s\nactivations: %.2f MB per example + %.2f MB, %s\n",
              model.description.c_str(), model.activation_bytes_per_example / 1e6,
              model.activation_fixed_bytes / 1e6, model.activation_source.c_str());
  std::printf("machine: %d devices, %.1f MB each, GEMM %.1f GFLOP/s, all-reduce %.2f GB/s\n",
              spec.devices, static_cast<double>(spec.device_bytes) / 1e6, spec.gemm_flops / 1e9,
              spec.link_bytes_per_s / 1e9);
  std::printf("global batch %lld, %d micro-batches (pipelines)\n\n",
              static_cast<long long>(request.global_batch), request.micro_batches);
  std::printf("%-16s %10s %10s %10s %10s %10s  %-5s %10s\n", "strategy", "P MB", "G MB", "O MB",
              "A MB", "total MB", "fits", "step ms");
  for (const ls::StrategyEstimate& e : plan.strategies) {
    std::printf("%-16s %10.1f %10.1f %10.1f %10.1f %10.1f  %-5s %10.2f\n", e.name.c_str(),
                mb(e.worst.parameters), mb(e.worst.gradients), mb(e.worst.optimizer),
                mb(e.worst.activations), mb(e.worst.total()), e.fits ? "yes" : "no", e.step_ms);
  }
  std::printf("\n(pipelines: the stage with the most memory; step times are estimates)\n");
  std::printf("recommendation: %s\n", plan.reason.c_str());
}

void write_json(const std::string& path, const ls::ModelProfile& model, const ls::MachineSpec& spec,
                const ls::Plan& plan) {
  ls::JsonWriter json;
  json.begin_object();
  json.field("model", model.description);
  json.field("activation_bytes_per_example", model.activation_bytes_per_example);
  json.field("devices", static_cast<int64_t>(spec.devices));
  json.field("device_bytes", spec.device_bytes);
  json.key("strategies").begin_array();
  for (const ls::StrategyEstimate& e : plan.strategies) {
    json.begin_object();
    json.field("name", e.name);
    json.field("stages", static_cast<int64_t>(e.stages));
    json.field("pipelines", static_cast<int64_t>(e.pipelines));
    json.field("parameters_bytes", e.worst.parameters);
    json.field("gradients_bytes", e.worst.gradients);
    json.field("optimizer_bytes", e.worst.optimizer);
    json.field("activations_bytes", e.worst.activations);
    json.field("total_bytes", e.worst.total());
    json.field("fits", e.fits);
    json.field("step_ms", e.step_ms);
    json.end_object();
  }
  json.end_array();
  json.field("recommended", plan.recommended < 0
                                ? std::string("none")
                                : plan.strategies[static_cast<size_t>(plan.recommended)].name);
  json.field("reason", plan.reason);
  json.end_object();
  json.write_file(path);
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
    const ls::ModelProfile model = profile(o);
    const ls::MachineSpec spec = machine(o, devices);
    ls::PlanRequest request;
    request.global_batch = o.batch;
    request.micro_batches = static_cast<int>(o.micro_batches);
    request.schedule = ls::parse_schedule(o.schedule);
    request.buckets.cap_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20));
    const ls::Plan plan = ls::plan_strategies(model, spec, request);
    print_plan(model, spec, request, plan);
    if (!o.json_path.empty()) write_json(o.json_path, model, spec, plan);
    return 0;
  } catch (const ls::Error& e) {
    std::fprintf(stderr, "lockstep-plan: %s\n", e.what());
    return 1;
  }
}
