// The step ledger's time model: a recorded step's launches (ops/op_ledger.h) priced at achievable
// rates on a named GPU, and the step time and MFU they add up to. Pure functions; no device.
// Rates (issue 40): 16-bit GEMMs at 800 TFLOP/s (about 80% of the 989 TFLOP/s dense bf16 peak,
// what a bf16 8192^3 product reaches on an H100 or H200), f32 GEMMs at 80% of the f32 peak
// (67 TFLOP/s; gpu-check measured cublasSgemm at 51.1 on an H200), memory at 80% of the HBM
// bandwidth (H100 SXM 3.35 TB/s, H200 4.8 TB/s), and no launch under kLaunchFloorUs. Fused
// attention at 300 TFLOP/s, about what FlashAttention-2 reaches on an H100 at head dim 64: an
// assumption until gpu-check measures lockstep's own kernels (ops/cuda/fused_attention.cu).
#pragma once

#include <string>
#include <vector>

#include "ops/op_ledger.h"

namespace ls::ledger {

struct GpuRates {
  std::string name;        // "h100"
  double tensor_flops;     // 16-bit GEMM FLOP/s reached
  double f32_flops;        // f32 GEMM FLOP/s reached
  double attention_flops;  // fused attention FLOP/s reached
  double bytes_per_s;      // memory traffic reached
  double peak_bf16_flops;  // the MFU denominator: 989e12
};

// "h100" or "h200"; an ls::Error (usage) naming both for anything else.
GpuRates gpu_rates(const std::string& name);

// The least a launch takes in a CUDA graph, however little it moves: the gap between two
// dependent kernels plus a small kernel's own run (a few microseconds on H100-class GPUs).
inline constexpr double kLaunchFloorUs = 3.0;

// Seconds one launch takes at the reached rates: the longer of its arithmetic and its memory
// traffic, and never below the launch floor.
double launch_seconds(const Launch& launch, const GpuRates& rates);

struct PricedRow {
  LedgerRow row;
  double seconds = 0;  // all `count` calls
};

struct StepPrediction {
  std::vector<PricedRow> rows;  // longest first
  double step_seconds = 0;
  int64_t launches = 0;
  double flops = 0;  // the launches' own arithmetic (attention's masked half included)
  double bytes = 0;
  int64_t unmodelled_ops = 0;  // rows whose op has no cost description (priced at the floor)
};

StepPrediction predict(const std::vector<LedgerRow>& rows, const GpuRates& rates);

}  // namespace ls::ledger
