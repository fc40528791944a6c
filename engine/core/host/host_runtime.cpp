// The host backend's DeviceRuntime: 64-byte aligned host memory behind the caching allocator,
// worker-thread streams, and a oneTBB arena per device sized to its share of the cores.
#include <cstdlib>
#include <cstring>

#include "engine/core/error.h"
#include "engine/core/host/host_stream.h"
#include "engine/core/runtime.h"

namespace ls {
namespace {

constexpr size_t kHostAlignment = 64;  // a cache line; also what AVX-512 loads like

class HostRuntime final : public DeviceRuntime {
 public:
  HostRuntime(Device device, int threads)
      : device_(device),
        threads_(threads),
        arena_(threads),
        allocator_([](size_t bytes) { return std::aligned_alloc(kHostAlignment, bytes); },
                   [](void* ptr) { std::free(ptr); }) {}

  Device device() const override { return device_; }
  std::unique_ptr<Stream> create_stream() override {
    return std::make_unique<HostStream>(device_, &arena_, threads_);
  }
  std::unique_ptr<Event> create_event() override { return std::make_unique<HostEvent>(device_); }
  void copy_async(void* dst, const void* src, size_t bytes, Stream& stream) override {
    LS_CHECK(stream.device() == device_, "copy_async: the stream belongs to ",
             stream.device().str(), ", not ", device_.str());
    if (bytes == 0) return;
    static_cast<HostStream&>(stream).enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  CachingAllocator& allocator() override { return allocator_; }

 private:
  Device device_;
  int threads_;
  tbb::task_arena arena_;
  CachingAllocator allocator_;
};

}  // namespace

std::unique_ptr<DeviceRuntime> make_host_runtime(Device device) {
  return std::make_unique<HostRuntime>(device, host_threads_per_device());
}

}  // namespace ls
