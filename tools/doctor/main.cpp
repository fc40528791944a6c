// lockstep-doctor: checks that this machine can train with lockstep.
// Lists the host and its GPUs (name, memory, peer-access matrix), the CUDA driver/runtime and
// NCCL versions, then runs a known-answer all-reduce over the devices (a thread per device, as
// training does) with a short timeout. Wrong results or a hang are reported with what usually
// fixes them. Exit codes: 0 pass, 1 fail, 2 usage error.
#include <lockstep/lockstep.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <string>
#include <thread>

#include "engine/core/runtime.h"
#include "engine/core/system_info.h"
#include "examples/cli_values.h"
#include "parallel/communicator.h"

namespace {

constexpr const char* kUsage =
    "usage: lockstep-doctor [--devices SPEC] [--timeout-ms N]\n"
    "  --devices SPEC   devices to check (default auto: every GPU, else one host device per core)\n"
    "  --timeout-ms N   how long the test all-reduce may take (default 20000)\n";

constexpr const char* kP2pAdvice =
    "peer-to-peer transfers between the GPUs look broken (common with an IOMMU or PCIe ACS "
    "enabled, and on some consumer GPUs). Try NCCL_P2P_DISABLE=1; for a lasting fix disable ACS "
    "on the PCIe switches or boot with iommu=pt. See docs/troubleshooting.md.";

void print_machine(const std::vector<ls::Device>& devices) {
  const ls::HostInfo host = ls::host_info();
  std::printf("host: %s, %d core(s), %.1f GiB\n", host.cpu_model.c_str(), host.cores,
              static_cast<double>(host.memory_bytes) / (1 << 30));
  const ls::GpuReport gpu = ls::gpu_report();
  std::printf("cuda: %s", ls::built_with_cuda() ? "built in" : "not built in");
  if (!gpu.driver_version.empty()) std::printf(", driver %s", gpu.driver_version.c_str());
  if (!gpu.runtime_version.empty()) std::printf(", runtime %s", gpu.runtime_version.c_str());
  if (!gpu.nccl_version.empty()) std::printf(", NCCL %s", gpu.nccl_version.c_str());
  std::printf("\n");
  if (gpu.gpus.empty()) std::printf("gpus: none (%s)\n", gpu.unavailable_reason.c_str());
  for (const ls::GpuInfo& g : gpu.gpus) {
    std::printf("  cuda:%d  %s  %.1f GiB  %s\n", g.index, g.name.c_str(),
                static_cast<double>(g.memory_bytes) / (1 << 30), g.pci_bus_id.c_str());
  }
  if (gpu.gpus.size() > 1) {
    std::printf("peer access (row can read column directly):\n       ");
    for (size_t j = 0; j < gpu.gpus.size(); ++j) std::printf(" %4zu", j);
    std::printf("\n");
    for (size_t i = 0; i < gpu.gpus.size(); ++i) {
      std::printf("  %4zu ", i);
      for (size_t j = 0; j < gpu.gpus.size(); ++j)
        std::printf(" %4s", gpu.peer_access[i][j] ? "yes" : "no");
      std::printf("\n");
    }
  }
  std::printf("checking: %s\n", ls::devices_str(devices).c_str());
}

// One rank's part of the known-answer all-reduce: element i of rank r is (r + 1) + i % 7, so the
// sum over n ranks is n(n+1)/2 + n (i % 7), exact in f32. Returns the number of wrong elements.
int64_t known_answer_rank(ls::Communicator& comm, ls::Device device) {
  constexpr int64_t kCount = (1 << 20) + 3;
  ls::DeviceRuntime& runtime = ls::device_runtime(device);
  runtime.bind_current_thread();
  auto stream = runtime.create_stream();
  std::vector<float> host(kCount);
  for (int64_t i = 0; i < kCount; ++i)
    host[static_cast<size_t>(i)] = static_cast<float>(comm.rank() + 1 + i % 7);
  ls::Tensor buffer = ls::Tensor::from_host(host, {kCount}, device, *stream);
  comm.all_reduce(buffer.data(), buffer.data(), kCount, ls::DType::kF32, ls::ReduceOp::kSum,
                  *stream);
  const std::vector<float> result = buffer.to_host_f32(*stream);
  const int64_t n = comm.size();
  int64_t wrong = 0;
  for (int64_t i = 0; i < kCount; ++i) {
    wrong += result[static_cast<size_t>(i)] != static_cast<float>(n * (n + 1) / 2 + n * (i % 7));
  }
  return wrong;
}

bool known_answer_all_reduce(const std::vector<ls::Device>& devices,
                             std::chrono::milliseconds timeout) {
  ls::CommunicatorOptions options;
  options.timeout = timeout;
  std::vector<std::unique_ptr<ls::Communicator>> comms = ls::make_communicators(devices, options);
  std::vector<std::future<int64_t>> ranks;
  for (size_t r = 0; r < devices.size(); ++r) {
    ranks.push_back(std::async(std::launch::async,
                               [&, r] { return known_answer_rank(*comms[r], devices[r]); }));
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(5);
  int64_t wrong = 0;
  std::string failure;
  for (size_t r = 0; r < ranks.size(); ++r) {
    if (ranks[r].wait_until(deadline) != std::future_status::ready) {
      std::printf("FAIL: the all-reduce hung (rank %zu on %s did not finish in %lld ms).\n  %s\n",
                  r, devices[r].str().c_str(), static_cast<long long>(timeout.count()), kP2pAdvice);
      for (auto& c : comms) c->abort();
      std::fflush(stdout);
      _exit(1);  // a rank stuck in the driver cannot be joined
    }
    try {
      wrong += ranks[r].get();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  if (!failure.empty()) {
    std::printf("FAIL: the all-reduce failed: %s\n", failure.c_str());
    if (devices[0].is_cuda()) std::printf("  %s\n", kP2pAdvice);
    return false;
  }
  if (wrong != 0) {
    std::printf("FAIL: the all-reduce gave %lld wrong element(s).\n",
                static_cast<long long>(wrong));
    if (devices[0].is_cuda()) std::printf("  %s\n", kP2pAdvice);
    return false;
  }
  std::printf("PASS: known-answer all-reduce over %zu device(s) (%s backend)\n", devices.size(),
              comms[0]->backend().c_str());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string spec = "auto";
  long long timeout_ms = 20000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    if ((arg == "--devices" || arg == "--timeout-ms") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--devices") {
        spec = value;
        continue;
      }
      try {
        size_t used = 0;
        timeout_ms = std::stoll(value, &used);
        if (used != value.size() || timeout_ms <= 0) throw std::invalid_argument("");
      } catch (const std::exception&) {
        std::fprintf(stderr, "lockstep-doctor: --timeout-ms needs a positive number, got '%s'\n%s",
                     value.c_str(), kUsage);
        return 2;
      }
      continue;
    }
    std::fprintf(stderr, "lockstep-doctor: unknown or incomplete option '%s'\n%s", arg.c_str(),
                 kUsage);
    return 2;
  }
  std::vector<ls::Device> devices;
  try {
    devices = ls::cli::parse_devices_flag("--devices", spec);
  } catch (const ls::cli::UsageError& e) {
    std::fprintf(stderr, "lockstep-doctor: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    print_machine(devices);
    return known_answer_all_reduce(devices, std::chrono::milliseconds(timeout_ms)) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}
