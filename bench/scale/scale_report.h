// The scaling test's outputs: efficiencies, the table on stdout and the JSON document.
//
// compute_efficiency fills
// each point's efficiency = per-device samples/s over the smallest run's (fewest devices, then
// fewest processes; the 1-device run unless every run spans processes).
// JSON schema (shared with bench/peers/pytorch_ddp.py): {"mode", "model", "backend", ...,
// "runs": [{"devices", "samples_per_s", "per_device_samples_per_s", "efficiency",
// "step_ms_median", "comm_exposed_ms", "final_loss", ...}]}.
#pragma once

#include <string>
#include <vector>

#include <lockstep/device.h>
#include "programs/common/workload.h"
#include "scale_options.h"
#include "scale_run.h"

void compute_efficiency(std::vector<ScalePoint>& points);
void print_table(const ScaleOptions& options, const std::string& description,
                 const std::vector<ScalePoint>& points);
// "lockstep-host" or "lockstep-cuda".
std::string backend_name(ls::DeviceKind kind);
void write_scale_json(const ScaleOptions& options, const Workload& work, ls::DeviceKind kind,
                      const std::vector<ScalePoint>& points, const std::string& path);
