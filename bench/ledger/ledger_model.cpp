// The step ledger's time model (bench/ledger/ledger_model.h).
#include "bench/ledger/ledger_model.h"

#include <algorithm>

#include <lockstep/error.h>

namespace ls::ledger {

GpuRates gpu_rates(const std::string& name) {
  constexpr double kGemmReached = 800e12, kDenseBf16Peak = 989e12, kF32Peak = 67e12;
  constexpr double kAttentionReached = 300e12;
  if (name == "h100") {
    return {"h100", kGemmReached, 0.8 * kF32Peak, kAttentionReached, 0.8 * 3.35e12, kDenseBf16Peak};
  }
  if (name == "h200") {
    return {"h200", kGemmReached, 0.8 * kF32Peak, kAttentionReached, 0.8 * 4.8e12, kDenseBf16Peak};
  }
  LS_THROW("unknown GPU '", name, "'; the ledger knows h100 and h200");
}

double launch_seconds(const Launch& launch, const GpuRates& rates) {
  double math = 0;
  if (launch.rate == LaunchRate::kTensorCore) math = launch.flops / rates.tensor_flops;
  if (launch.rate == LaunchRate::kF32Math) math = launch.flops / rates.f32_flops;
  if (launch.rate == LaunchRate::kFusedAttention) math = launch.flops / rates.attention_flops;
  const double memory = launch.bytes / rates.bytes_per_s;
  return std::max({math, memory, kLaunchFloorUs * 1e-6});
}

StepPrediction predict(const std::vector<LedgerRow>& rows, const GpuRates& rates) {
  StepPrediction p;
  for (const LedgerRow& row : rows) {
    const double count = static_cast<double>(row.count);
    PricedRow priced{row, count * launch_seconds(row.launch, rates)};
    p.step_seconds += priced.seconds;
    p.launches += row.count;
    p.flops += count * row.launch.flops;
    p.bytes += count * row.launch.bytes;
    if (!row.modelled) p.unmodelled_ops += row.count;
    p.rows.push_back(std::move(priced));
  }
  std::stable_sort(p.rows.begin(), p.rows.end(),
                   [](const PricedRow& a, const PricedRow& b) { return a.seconds > b.seconds; });
  return p;
}

}  // namespace ls::ledger
