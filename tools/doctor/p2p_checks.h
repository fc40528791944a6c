// lockstep-doctor's peer-to-peer checks, for each pair of GPUs:
//   - CUDA's peer-access answer (cudaDeviceCanAccessPeer),
//   - a timed device-to-device copy against what the link between them should carry,
//   - a known-answer all-reduce through NCCL with peer-to-peer on, then with NCCL_P2P_DISABLE=1,
//     each in a child process (NCCL reads its environment once per process) with a bounded wait.
// A pair that hangs with P2P on and works with it off has a broken P2P path: the classic cause
// is PCIe ACS redirecting peer traffic to the root complex, or an IOMMU translating it.
// The verdicts are pure functions of what was measured (judge_*), tested on fixture answers.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "engine/core/system_info.h"
#include "tools/doctor/allreduce_check.h"
#include "tools/doctor/finding.h"
#include "tools/doctor/machine.h"
#include "tools/doctor/pci_sysfs.h"

namespace ls::doctor {

// What one GPU's PCIe link can carry per direction, from its width and generation; gbps 0 when
// unknown. E.g. {63.0, "PCIe Gen5 x16"}.
struct LinkBound {
  double gbps = 0;
  std::string text;
};
// Theoretical per-direction bandwidth of a PCIe link: generation 1..6, width in lanes (0 when
// either is out of range).
double pcie_link_gbps(int generation, int width);
// A GPU's bound from sysfs: its trained width at its maximum generation (an idle link drops its
// generation to save power and speeds up under load; its width stays).
LinkBound link_bound_of(const SystemPaths& paths, const GpuId& gpu);

// The copy a->b measured at `gbps` (negative when it failed or hung, with `error`).
Finding judge_peer_copy(const GpuId& a, const GpuId& b, bool peer_access, double gbps,
                        const std::string& error, const LinkBound& link_a, const LinkBound& link_b);
// How one child all-reduce ended: from its exit and the JSON finding it prints (main.cpp's
// --all-reduce-only).
struct PairRun {
  enum class Outcome { kExact, kHung, kFailed };
  Outcome outcome = Outcome::kFailed;
  std::string detail;  // the child's finding, or why there is none
};
PairRun pair_run_of(const ChildResult& child);
Finding judge_pair_all_reduce(const GpuId& a, const GpuId& b, const PairRun& p2p_on,
                              const PairRun& p2p_off);

// Runs every check on every pair; `links` is indexed like `gpus`. A copy that hangs ends the
// checks and sets *wedged: a thread is stuck in the driver, so the caller must not use the GPUs
// in this process again and should exit (_exit) when it has reported.
Findings check_p2p(const GpuReport& report, const std::vector<GpuId>& gpus,
                   const std::vector<LinkBound>& links, std::chrono::milliseconds timeout,
                   bool* wedged);

}  // namespace ls::doctor
