// The step ledger measured on a device (lockstep-step-ledger --measure DEVICE): every op call of a
// GPT training step timed where it runs (a timed OpLedger, ops/op_ledger.h), next to the ceilings
// measured in the same process, and the step run twice from the same start to show it repeats.
#pragma once

#include <cstdint>
#include <vector>

#include <lockstep/data_parallel.h>
#include "ops/op_ledger.h"

namespace ls::ledger {

// What this device reaches on the two kinds of work the step's launches are priced by: a bf16
// product of gemm_side^3 (8192 on a GPU) through matmul_bf16_epilogue (cuBLASLt, bf16 out) on
// random data, and a device-to-device copy of copy_bytes (1 GiB) counted as bytes read +
// written. Medians of 10 timed calls after a warm-up one.
struct Ceilings {
  double gemm_flops_per_s = 0;
  double copy_bytes_per_s = 0;
};
Ceilings measure_ceilings(Device device, int64_t gemm_side, int64_t copy_bytes);

struct MeasuredStep {
  std::vector<MeasuredRow> rows;  // the third step's op calls, timed
  double step_seconds = 0;        // that step, host wall clock from its start to its end
  std::vector<float> losses;      // of the steps, in order
  uint32_t parameter_hash = 0;    // CRC-32 of replica 0's parameters' bits after the last step
};
// `steps` (>= 3) training steps of `config` at `batch` sequences on `device`, one replica, eager
// (graphs replay launches a timed ledger cannot see); the third is timed.
MeasuredStep measure_step(const nn::TransformerConfig& config, int64_t batch, Precision precision,
                          Device device, int steps);

}  // namespace ls::ledger
