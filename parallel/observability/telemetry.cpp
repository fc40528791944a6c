// TelemetryRecorder (see parallel/observability/telemetry.h).
#include "parallel/observability/telemetry.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include <lockstep/error.h>
#include "engine/core/gpu_monitor.h"
#include <lockstep/json.h>
#include "engine/core/runtime.h"
#include "engine/core/system_info.h"

namespace ls {
namespace {

// UTC wall-clock time with milliseconds: what a reader lines up with the kernel log.
std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[96];  // room for any int the format could print (GCC checks the worst case)
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms));
  return buf;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return buf;
}

// The GPU part of a sample: JSON fields and the words of the hang report.
void add_gpu_fields(const GpuSample& g, JsonWriter& json, std::string& described) {
  char buf[160];
  if (g.power_w >= 0) json.field("power_w", g.power_w);
  if (g.power_limit_w >= 0) json.field("power_limit_w", g.power_limit_w);
  if (g.temperature_c >= 0) json.field("temperature_c", g.temperature_c);
  if (g.sm_clock_mhz >= 0) json.field("sm_clock_mhz", g.sm_clock_mhz);
  if (g.max_sm_clock_mhz >= 0) json.field("max_sm_clock_mhz", g.max_sm_clock_mhz);
  if (g.throttle_reasons_known) {
    json.field("throttle", throttle_reason_names(g.throttle_reasons));
    json.field("throttle_bits", static_cast<int64_t>(g.throttle_reasons));
  }
  // The report names only what the driver reported (-1 is "unknown").
  if (g.power_w >= 0) {
    std::snprintf(buf, sizeof buf, ", %.0f W", g.power_w);
    described += buf;
    if (g.power_limit_w >= 0) {
      std::snprintf(buf, sizeof buf, " of %.0f W", g.power_limit_w);
      described += buf;
    }
  }
  if (g.temperature_c >= 0) described += ", " + std::to_string(g.temperature_c) + " C";
  if (g.sm_clock_mhz >= 0) {
    described += ", SM " + std::to_string(g.sm_clock_mhz);
    if (g.max_sm_clock_mhz >= 0) described += " of " + std::to_string(g.max_sm_clock_mhz);
    described += " MHz";
  }
  if (g.throttle_reasons_known)
    described += ", throttle " + throttle_reason_names(g.throttle_reasons);
}

}  // namespace

struct TelemetryRecorder::State {
  std::string path;
  std::chrono::milliseconds interval;
  std::vector<Device> devices;
  std::vector<std::string> pci_bus_ids;  // per device; "" for host devices
  std::unique_ptr<GpuMonitor> monitor;   // only when some device is a GPU
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int fd = -1;
  std::atomic<int64_t> step{0};
  std::atomic<int64_t> samples_written{0};
  std::vector<AllocatorStats> memory;  // per device, the newest readable counters (sampler only)
  bool torn_line = false;              // a write failed part-way (sampler only)

  std::mutex mutex;  // guards the members below
  std::condition_variable wake;
  bool stopping = false;
  bool finished = false;          // the thread has left its loop
  std::vector<std::string> last;  // per device: the newest sample, described

  ~State() {
    if (fd >= 0) ::close(fd);
  }

  void write_line(const std::string& line) {
    // After a write that failed part-way (a full disk), end the fragment first, so every later
    // line still parses on its own.
    const std::string text = torn_line ? "\n" + line : line;
    size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        const int err = n < 0 ? errno : ENOSPC;
        torn_line = torn_line || done > 0;
        LS_THROW_IO("cannot write the telemetry file '", path, "': ", std::strerror(err));
      }
      done += static_cast<size_t>(n);
    }
    torn_line = false;
    // On the disk before the next sample: a machine reset keeps everything up to here.
    ::fdatasync(fd);
  }

  void sample_all() {
    const double t_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string time = utc_now();
    const int64_t current = step.load();
    std::string lines;
    std::vector<std::string> described(devices.size());
    memory.resize(devices.size());
    for (size_t i = 0; i < devices.size(); ++i) {
      // Never wait for the allocator: a replica may hold it inside a cudaMalloc that hangs.
      const std::optional<AllocatorStats> now = device_runtime(devices[i]).allocator().try_stats();
      if (now) memory[i] = *now;
      JsonWriter json;
      json.begin_object().field("event", "sample").field("time", time).field("t_s", t_s);
      json.field("device", devices[i].str()).field("step", current);
      json.field("memory_in_use", memory[i].bytes_in_use);
      json.field("memory_peak", memory[i].peak_bytes_in_use);
      json.field("memory_reserved", memory[i].bytes_reserved);
      if (!now) json.field("memory_busy", true);  // the allocator was busy: the last values
      char head[64];
      std::snprintf(head, sizeof head, " at %.1f s: step %lld, ", t_s,
                    static_cast<long long>(current));
      described[i] = devices[i].str() + head + gib(memory[i].bytes_in_use) + " in use (peak " +
                     gib(memory[i].peak_bytes_in_use) + ")";
      if (!now) described[i] += " [allocator busy]";
      if (monitor && !pci_bus_ids[i].empty()) {
        if (const std::optional<GpuSample> gpu = monitor->sample(pci_bus_ids[i])) {
          add_gpu_fields(*gpu, json, described[i]);
        }
      }
      json.end_object();
      lines += json.str() + "\n";
    }
    write_line(lines);
    samples_written.fetch_add(static_cast<int64_t>(devices.size()));
    std::lock_guard lock(mutex);
    last = std::move(described);
  }

  void run() {
    std::unique_lock lock(mutex);
    while (!stopping) {
      lock.unlock();
      try {
        sample_all();
      } catch (...) {
        // Telemetry must never stop training: a full disk loses samples, not the run.
      }
      lock.lock();
      wake.wait_for(lock, interval, [this] { return stopping; });
    }
    finished = true;
    wake.notify_all();
  }
};

namespace {

// The GPUs' bus ids ("" for host devices), from the CUDA backend's report.
std::vector<std::string> bus_ids_of(const std::vector<Device>& devices) {
  std::vector<std::string> ids(devices.size());
  bool any_gpu = false;
  for (const Device& d : devices) any_gpu = any_gpu || d.is_cuda();
  if (!any_gpu) return ids;
  const GpuReport report = gpu_report();
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i].is_cuda()) ids[i] = pci_bus_id_of(report, devices[i].index);
  }
  return ids;
}

}  // namespace

TelemetryRecorder::TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                                     std::vector<Device> devices)
    : TelemetryRecorder(std::move(path), interval, devices, nullptr, bus_ids_of(devices)) {}

TelemetryRecorder::TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                                     std::vector<Device> devices,
                                     std::unique_ptr<GpuMonitor> monitor,
                                     std::vector<std::string> pci_bus_ids)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.path = std::move(path);
  s.interval = interval;
  s.devices = std::move(devices);
  s.pci_bus_ids = std::move(pci_bus_ids);
  s.last.assign(s.devices.size(), "");
  LS_CHECK(s.interval.count() > 0, "telemetry interval must be positive, got ", s.interval.count(),
           " ms");
  LS_CHECK(s.pci_bus_ids.size() == s.devices.size(), "telemetry: ", s.pci_bus_ids.size(),
           " bus ids for ", s.devices.size(), " devices");
  bool any_gpu = false;
  for (const std::string& id : s.pci_bus_ids) any_gpu = any_gpu || !id.empty();
  s.monitor = std::move(monitor);
  if (any_gpu && !s.monitor) s.monitor = make_nvml_monitor();
  do {
    s.fd = ::open(s.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  } while (s.fd < 0 && errno == EINTR);
  LS_CHECK_IO(s.fd >= 0, "cannot open the telemetry file '", s.path, "': ", std::strerror(errno),
              " (does its directory exist and is it writable?)");
  JsonWriter start;
  start.begin_object().field("event", "start").field("time", utc_now());
  start.field("pid", static_cast<int64_t>(::getpid()));
  start.key("devices").begin_array();
  for (const Device& d : s.devices) start.value(d.str());
  start.end_array();
  if (s.monitor && !s.monitor->unavailable_reason().empty()) {
    start.field("gpu_metrics", "unavailable: " + s.monitor->unavailable_reason());
  }
  start.end_object();
  s.write_line(start.str() + "\n");
  thread_ = std::thread([state = state_] { state->run(); });
}

TelemetryRecorder::~TelemetryRecorder() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  s.stopping = true;
  s.wake.notify_all();
  if (!s.wake.wait_for(lock, std::chrono::seconds(2), [&] { return s.finished; })) {
    // Stuck (in the driver, or fdatasync behind a big flush): the thread keeps the state alive.
    // The stop line says so, written straight to the file (an O_APPEND write is safe beside
    // the stuck thread's).
    lock.unlock();
    thread_.detach();
    const std::string stop = "{\"event\": \"stop\", \"time\": \"" + utc_now() +
                             "\", \"sampler\": \"abandoned: stuck for 2 s\"}\n";
    const ssize_t ignored = ::write(s.fd, stop.data(), stop.size());
    (void)ignored;
    return;
  }
  lock.unlock();
  thread_.join();
  try {
    s.sample_all();
    JsonWriter stop;
    stop.begin_object().field("event", "stop").field("time", utc_now());
    stop.field("samples", s.samples_written.load()).end_object();
    s.write_line(stop.str() + "\n");
  } catch (...) {
    // A destructor must not throw; the file already holds every earlier sample.
  }
}

void TelemetryRecorder::set_step(int64_t step) { state_->step.store(step); }

const std::string& TelemetryRecorder::path() const { return state_->path; }

int64_t TelemetryRecorder::samples_written() const { return state_->samples_written.load(); }

std::string TelemetryRecorder::last_samples() const {
  std::lock_guard lock(state_->mutex);
  std::string out = "telemetry in " + state_->path + "; last samples: ";
  bool any = false;
  for (const std::string& s : state_->last) {
    if (s.empty()) continue;
    out += (any ? "; " : "") + s;
    any = true;
  }
  return any ? out : out + "none yet";
}

}  // namespace ls
