// What lockstep-plan and lockstep-train --strategy auto share: a model's planner profile from its
// factory (transformer or MLP) and a batch maker, the machine (memory per device from
// MemAvailable for host devices unless given; GEMM rate and all-reduce bandwidth measured unless
// given), and the plan's table, reason and JSON. Errors are ls::Error (exit 1).
#pragma once

#include <lockstep/lockstep.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

struct PlanModel {
  ls::ModelFactory model;
  std::optional<ls::nn::TransformerConfig> transformer;  // or:
  std::vector<int64_t> mlp_widths;                       // input to output
  std::function<ls::data::Batch(int64_t rows)> batch;
  std::string description;
};

// Transformers deeper than 2 layers are probed at 1 and 2 layers and extrapolated.
ls::ModelProfile plan_profile(const PlanModel& model, const ls::OptimizerSpec& optimizer);

struct MachineFlags {
  double device_memory_gb = 0;  // 0: host devices' MemAvailable / devices
  double gemm_gflops = 0;       // 0: measured
  double link_gbps = 0;         // 0: measured
};
ls::MachineSpec plan_machine(const MachineFlags& flags, const std::vector<ls::Device>& devices);

void print_plan(const ls::ModelProfile& model, const ls::MachineSpec& spec,
                const ls::PlanRequest& request, const ls::Plan& plan);
void write_plan_json(const std::string& path, const ls::ModelProfile& model,
                     const ls::MachineSpec& spec, const ls::Plan& plan);
