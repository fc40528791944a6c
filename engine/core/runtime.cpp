// The process-wide registry of device runtimes, created on first use.
// Runtimes live until the process exits, so a Tensor or Stream never outlives its device.
#include "engine/core/runtime.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>

#include <lockstep/error.h>

namespace ls {
namespace {

std::atomic<int> g_host_threads{1};
std::atomic<bool> g_host_runtime_created{false};

struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::unique_ptr<DeviceRuntime>> runtimes;
};

Registry& registry() {
  // Leaked on purpose: tensors in static objects may be freed after main returns, and their
  // allocators must still be there.
  static Registry* instance = new Registry;
  return *instance;
}

}  // namespace

DeviceRuntime& device_runtime(Device device) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  auto key = std::make_pair(static_cast<int>(device.kind), device.index);
  auto it = reg.runtimes.find(key);
  if (it != reg.runtimes.end()) return *it->second;
  LS_CHECK(device.index >= 0, "device index ", device.index, " is negative");
  std::unique_ptr<DeviceRuntime> runtime;
  if (device.is_host()) {
    g_host_runtime_created = true;
    runtime = make_host_runtime(device);
  } else {
    runtime = make_cuda_runtime(device);
  }
  return *reg.runtimes.emplace(key, std::move(runtime)).first->second;
}

void* DeviceRuntime::allocate_pinned(size_t bytes) {
  constexpr size_t kAlignment = 64;
  void* ptr = std::aligned_alloc(
      kAlignment, (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment);
  LS_CHECK(ptr != nullptr, "out of host memory: could not allocate ", bytes,
           " bytes of staging memory");
  return ptr;
}

void DeviceRuntime::free_pinned(void* ptr) { std::free(ptr); }

void set_host_threads_per_device(int threads) {
  LS_CHECK(threads >= 1, "host threads per device must be >= 1, got ", threads);
  LS_CHECK(!g_host_runtime_created || threads == g_host_threads,
           "set_host_threads_per_device(", threads, ") came after host devices were created with ",
           g_host_threads.load(), " thread(s) each; set it before the first use of a host device");
  g_host_threads = threads;
}

int host_threads_per_device() { return g_host_threads; }

}  // namespace ls
