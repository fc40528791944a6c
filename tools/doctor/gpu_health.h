// The doctor's checks of the GPUs as they run, from the driver (a GpuMonitor, NVML in the tool,
// fixtures in the tests) and from the kernel log:
//   sharing        other compute processes on a GPU, and its compute mode
//   gpu-memory     free memory per GPU, and who holds the rest
//   power-thermal  power draw against the limit, temperature, SM clock, why clocks are held
//   xid            the driver's Xid error reports for our GPUs
// Each check gives one finding per GPU (subject "cuda:<index>"). Without GPUs, or without a
// usable monitor or kernel log, each gives one N/A finding (subject "host") that says why.
#pragma once

#include <sys/types.h>

#include <vector>

#include "engine/core/gpu_monitor.h"
#include "tools/doctor/finding.h"
#include "tools/doctor/machine.h"
#include "tools/doctor/xid.h"

namespace ls::doctor {

// Other processes on a GPU (self excluded: the doctor may hold contexts of its own) -> WARN,
// naming them; compute mode Prohibited -> FAIL; Exclusive_Process held by another -> FAIL.
// Run it before this process creates CUDA contexts: inside a container the driver reports
// host pids, so self cannot be recognised there.
Findings check_sharing(GpuMonitor& monitor, const std::vector<GpuId>& gpus, pid_t self);

// Free memory under kLowFreeFraction of the total or under kLowFreeBytes -> WARN, naming the
// other processes that hold memory.
inline constexpr double kLowFreeFraction = 0.10;
inline constexpr int64_t kLowFreeBytes = int64_t{2} << 30;
Findings check_memory(GpuMonitor& monitor, const std::vector<GpuId>& gpus, pid_t self);

// Clocks held down by hardware (HW slowdown, HW thermal, HW power brake) -> FAIL; by software
// (SW power cap, SW thermal), drawing kPowerCapFraction of the limit or more, or at kHotCelsius
// or above -> WARN; idle, application clocks, sync boost, display clocks -> OK.
inline constexpr double kPowerCapFraction = 0.98;
inline constexpr int kHotCelsius = 85;
Findings check_power_thermal(GpuMonitor& monitor, const std::vector<GpuId>& gpus);

// Xids in the log for one of gpus -> FAIL or WARN by code (xid_info), with what the code means
// and what to do; Xids of other GPUs are not ours and are left out.
Findings check_xid(const KernelLog& log, const std::vector<GpuId>& gpus);

}  // namespace ls::doctor
