// plan_support (see programs/common/plan_support.h).
#include "programs/common/plan_support.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace {

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

double mb(int64_t bytes) { return static_cast<double>(bytes) / 1e6; }

}  // namespace

ls::ModelProfile plan_profile(const PlanModel& m, const ls::OptimizerSpec& optimizer) {
  ls::ProbeOptions probe;
  probe.optimizer = optimizer;
  probe.batch = m.batch;
  if (m.transformer) {
    const ls::nn::TransformerConfig c = *m.transformer;
    probe.train_flops_per_example =
        c.train_flops_per_token(c.max_seq) * static_cast<double>(c.max_seq);
    probe.boundary_bytes_per_example = 4.0 * static_cast<double>(c.hidden * c.max_seq);
    // Recompute repeats the blocks' forward: their weights' GEMMs and attention, not the
    // embeddings' or the head's.
    const double h = static_cast<double>(c.hidden), layers = static_cast<double>(c.layers);
    const double block_flops = 6.0 * layers * (4.0 * h * h + 2.0 * h * static_cast<double>(c.ffn)) +
                               12.0 * layers * static_cast<double>(c.max_seq) * h;
    probe.recomputed_flops_share = std::min(1.0, block_flops / c.train_flops_per_token(c.max_seq));
    if (c.layers > 2) {
      probe.with_layers = [c](int64_t layers) {
        ls::nn::TransformerConfig shallow = c;
        shallow.layers = layers;
        return ls::transformer_factory(shallow);
      };
      probe.layers = c.layers;
    }
    ls::ModelProfile profile = ls::profile_model(m.model, probe);
    profile.description = m.description.empty() ? c.describe() : m.description;
    return profile;
  }
  int64_t params = 0, widest = 0;
  for (size_t i = 1; i < m.mlp_widths.size(); ++i) {
    params += m.mlp_widths[i - 1] * m.mlp_widths[i] + m.mlp_widths[i];
    widest = std::max(widest, m.mlp_widths[i]);
  }
  probe.train_flops_per_example = 6.0 * static_cast<double>(params);
  probe.boundary_bytes_per_example = 4.0 * static_cast<double>(widest);
  ls::ModelProfile profile = ls::profile_model(m.model, probe);
  profile.description =
      m.description.empty() ? "mlp, " + std::to_string(params) + " parameters" : m.description;
  return profile;
}

ls::MachineSpec plan_machine(const MachineFlags& flags, const std::vector<ls::Device>& devices) {
  LS_CHECK(!devices.empty(), "no devices to plan for");
  ls::MachineSpec m;
  m.devices = static_cast<int>(devices.size());
  if (flags.device_memory_gb > 0) {
    m.device_bytes = static_cast<int64_t>(flags.device_memory_gb * 1e9);
  } else {
    LS_CHECK(devices[0].kind == ls::DeviceKind::kHost,
             "give --device-memory-gb for CUDA devices (not measured yet)");
    m.device_bytes = mem_available_bytes() / m.devices;
  }
  m.gemm_flops =
      flags.gemm_gflops > 0 ? flags.gemm_gflops * 1e9 : ls::measure_gemm_flops(devices[0]);
  m.link_bytes_per_s =
      flags.link_gbps > 0 ? flags.link_gbps * 1e9 : ls::measure_all_reduce_busbw(devices);
  return m;
}

void print_plan(const ls::ModelProfile& model, const ls::MachineSpec& spec,
                const ls::PlanRequest& request, const ls::Plan& plan) {
  std::printf("model: %s\nactivations: %.2f MB per example + %.2f MB, %s\n",
              model.description.c_str(), model.activation_bytes_per_example / 1e6,
              model.activation_fixed_bytes / 1e6, model.activation_source.c_str());
  if (model.recompute_measured) {
    std::printf("with --recompute blocks: %.2f MB per example + %.2f MB\n",
                model.recompute_bytes_per_example / 1e6, model.recompute_fixed_bytes / 1e6);
  }
  std::printf("machine: %d devices, %.1f MB each, GEMM %.1f GFLOP/s, all-reduce %.2f GB/s\n",
              spec.devices, static_cast<double>(spec.device_bytes) / 1e6, spec.gemm_flops / 1e9,
              spec.link_bytes_per_s / 1e9);
  std::printf("global batch %lld, %d micro-batches (pipelines)\n\n",
              static_cast<long long>(request.global_batch), request.micro_batches);
  std::printf("%-26s %10s %10s %10s %10s %10s  %-5s %10s %10s\n", "strategy", "P MB", "G MB",
              "O MB", "A MB", "total MB", "fits", "step ms", "bucket MiB");
  for (const ls::StrategyEstimate& e : plan.strategies) {
    char bucket[16] = "-";
    if (e.bucket_cap_bytes > 0) {
      std::snprintf(bucket, sizeof bucket, "%g",
                    static_cast<double>(e.bucket_cap_bytes) / (1 << 20));
    }
    std::printf("%-26s %10.1f %10.1f %10.1f %10.1f %10.1f  %-5s %10.2f %10s\n", e.name.c_str(),
                mb(e.worst.parameters), mb(e.worst.gradients), mb(e.worst.optimizer),
                mb(e.worst.activations), mb(e.worst.total()),
                e.fits ? "yes" : (e.infeasible.empty() ? "no" : "n/a"), e.step_ms, bucket);
  }
  for (const ls::StrategyEstimate& e : plan.strategies) {
    if (!e.infeasible.empty()) std::printf("n/a: %s: %s\n", e.name.c_str(), e.infeasible.c_str());
  }
  std::printf(
      "\n(pipelines: the stage with the most memory; A includes ZeRO-2/3's bucket staging,\n"
      "ZeRO-3's gathered parameters and a pipeline's boundary tensors; step times are\n"
      "estimates; bucket: the gradient bucket cap %s)\n",
      request.choose_buckets ? "the planner chose for the strategy (--bucket-mb fixes it)"
                             : "given by --bucket-mb");
  std::printf("recommendation: %s\n", plan.reason.c_str());
}

void write_plan_json(const std::string& path, const ls::ModelProfile& model,
                     const ls::MachineSpec& spec, const ls::Plan& plan) {
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
    json.field("shard", ls::shard_mode_name(e.shard));
    json.field("recompute", ls::recompute_name(e.recompute));
    json.field("stages", static_cast<int64_t>(e.stages));
    json.field("pipelines", static_cast<int64_t>(e.pipelines));
    json.field("parameters_bytes", e.worst.parameters);
    json.field("gradients_bytes", e.worst.gradients);
    json.field("optimizer_bytes", e.worst.optimizer);
    json.field("activations_bytes", e.worst.activations);
    json.field("total_bytes", e.worst.total());
    json.field("fits", e.fits);
    json.field("infeasible", e.infeasible);
    json.field("step_ms", e.step_ms);
    json.field("bucket_bytes", e.bucket_cap_bytes);
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
