// What lockstep-doctor reports about the machine: host cores and memory, GPUs with their
// memory and peer-access matrix, and the CUDA driver/runtime and NCCL versions.
// The GPU part comes from the CUDA backend file compiled in (engine/cuda or engine/no_cuda).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ls {

struct GpuInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;
  std::string pci_bus_id;
};

struct GpuReport {
  std::string unavailable_reason;  // empty when GPUs are usable
  std::string driver_version;      // e.g. "13.0"; "" when unknown
  std::string runtime_version;
  std::string nccl_version;
  std::vector<GpuInfo> gpus;
  std::vector<std::vector<bool>> peer_access;  // [i][j]: i can access j's memory directly
};

GpuReport gpu_report();

// Copies `bytes` from GPU `from` to GPU `to` (cudaMemcpyPeerAsync, with peer access enabled when
// the pair allows it, else staged by the driver through the host) and returns the median rate
// of 5 timed copies in GB/s (1e9 bytes/s). Raises ls::Error when a CUDA call fails, and in builds
// without CUDA. It may hang on a machine whose peer-to-peer path is broken: call it from a
// thread the caller can abandon.
double peer_copy_gbps(int from, int to, int64_t bytes);

struct HostInfo {
  int cores = 0;              // this process's affinity
  int64_t memory_bytes = 0;   // MemTotal
  std::string cpu_model;
};
HostInfo host_info();

// Field `name` ("MemTotal", "MemAvailable", ...) of a /proc/meminfo-format file in bytes, or -1
// when the file or field is missing or malformed.
int64_t meminfo_bytes(const std::string& path, const std::string& name);

// The PCI bus id the report gives GPU `cuda_index` ("0000:3B:00.0"), or "" when it has none.
std::string pci_bus_id_of(const GpuReport& report, int cuda_index);

}  // namespace ls
