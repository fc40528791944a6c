// The host backend's DeviceRuntime: 64-byte aligned host memory behind the caching allocator,
// worker-thread streams, and a oneTBB arena per device sized to its share of the cores.
#include <cstdlib>
#include <cstring>

#include <lockstep/error.h>
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

  void begin_capture(Stream& origin, const std::vector<Stream*>& joined) override {
    auto capture = std::make_unique<HostCapture>();
    capture->streams.push_back(host_stream_of(origin, "begin_capture"));
    for (Stream* s : joined) capture->streams.push_back(host_stream_of(*s, "begin_capture"));
    for (HostStream* s : capture->streams) {
      LS_CHECK(s->capture() == nullptr, "begin_capture: a stream of ", device_.str(),
               " is being captured already; end that capture first");
    }
    capture->pool = allocator_.begin_capture_pool();
    for (HostStream* s : capture->streams) s->set_capture(capture.get());
    capture.release();  // owned by the streams' pointer until end_capture
  }

  std::unique_ptr<StreamGraph> end_capture(Stream& origin) override {
    HostStream* stream = host_stream_of(origin, "end_capture");
    HostCapture* captured = stream->capture();
    LS_CHECK(captured != nullptr && captured->streams.front() == stream,
             "end_capture: end the capture on the stream it began on");
    std::unique_ptr<HostCapture> capture(captured);  // owned here only once it is the right one
    for (HostStream* s : capture->streams) s->set_capture(nullptr);
    allocator_.end_capture_pool();
    return std::make_unique<HostGraph>(std::move(capture));
  }

  bool capturing(const Stream& stream) const override {
    auto* host = dynamic_cast<const HostStream*>(&stream);
    return host != nullptr && host->capture() != nullptr;
  }

  bool capture_call(Stream& stream, std::function<void()> call) override {
    HostStream* host = host_stream_of(stream, "capture_call");
    if (host->capture() == nullptr) return false;
    host->capture()->nodes.push_back({HostCapture::Kind::kCall, nullptr, std::move(call)});
    return true;
  }

 private:
  HostStream* host_stream_of(Stream& stream, const char* what) const {
    auto* host = dynamic_cast<HostStream*>(&stream);
    LS_CHECK(host != nullptr && stream.device() == device_, what, ": the stream belongs to ",
             stream.device().str(), ", not ", device_.str());
    return host;
  }

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
