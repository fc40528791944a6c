// TelemetryRecorder (see parallel/telemetry.h).
#include "parallel/telemetry.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "engine/core/error.h"
#include "engine/core/json.h"
#include "engine/core/runtime.h"

namespace ls {
namespace {

// UTC wall-clock time with milliseconds: what a log reader lines up with the kernel log.
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

}  // namespace

TelemetryRecorder::TelemetryRecorder(std::string path, std::chrono::milliseconds interval,
                                     std::vector<Device> devices,
                                     std::function<int64_t()> current_step)
    : path_(std::move(path)),
      interval_(interval),
      devices_(std::move(devices)),
      current_step_(std::move(current_step)),
      start_(std::chrono::steady_clock::now()),
      last_(devices_.size()) {
  LS_CHECK(interval_.count() > 0, "telemetry interval must be positive, got ", interval_.count(),
           " ms");
  do {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  } while (fd_ < 0 && errno == EINTR);
  LS_CHECK_IO(fd_ >= 0, "cannot open the telemetry file '", path_, "': ", std::strerror(errno),
              " (does its directory exist and is it writable?)");
  JsonWriter start;
  start.begin_object().field("event", "start").field("time", utc_now());
  start.field("pid", static_cast<int64_t>(::getpid()));
  start.key("devices").begin_array();
  for (const Device& d : devices_) start.value(d.str());
  start.end_array().end_object();
  write_line(start.str());
  thread_ = std::thread([this] { run(); });
}

TelemetryRecorder::~TelemetryRecorder() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  try {
    sample_all();
    JsonWriter stop;
    stop.begin_object().field("event", "stop").field("time", utc_now());
    stop.field("samples", samples_written_.load()).end_object();
    write_line(stop.str());
  } catch (...) {
    // A destructor must not throw; the file already holds every earlier sample.
  }
  ::close(fd_);
}

void TelemetryRecorder::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    lock.unlock();
    try {
      sample_all();
    } catch (...) {
      // Telemetry must never stop training: a full disk loses samples, not the run.
    }
    lock.lock();
    wake_.wait_for(lock, interval_, [this] { return stopping_; });
  }
}

void TelemetryRecorder::sample_all() {
  const double t_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const std::string time = utc_now();
  const int64_t step = current_step_();
  std::string lines;
  std::vector<std::string> described(devices_.size());
  for (size_t i = 0; i < devices_.size(); ++i) {
    const Device& device = devices_[i];
    const AllocatorStats memory = device_runtime(device).allocator().stats();
    JsonWriter json;
    json.begin_object().field("event", "sample").field("time", time).field("t_s", t_s);
    json.field("device", device.str()).field("step", step);
    json.field("memory_in_use", memory.bytes_in_use).field("memory_peak", memory.peak_bytes_in_use);
    json.field("memory_reserved", memory.bytes_reserved);
    json.end_object();
    lines += json.str() + "\n";
    char head[64];
    std::snprintf(head, sizeof head, " at %.1f s: step %lld, ", t_s, static_cast<long long>(step));
    described[i] = device.str() + head + gib(memory.bytes_in_use) + " in use (peak " +
                   gib(memory.peak_bytes_in_use) + ")";
  }
  write_line(lines.substr(0, lines.size() - 1));
  samples_written_.fetch_add(static_cast<int64_t>(devices_.size()));
  std::lock_guard lock(mutex_);
  last_ = std::move(described);
}

void TelemetryRecorder::write_line(const std::string& line) {
  const std::string text = line + "\n";
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd_, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    LS_CHECK_IO(n > 0, "cannot write the telemetry file '", path_, "': ", std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  // On the disk before the next sample: a machine reset keeps everything up to this line.
  ::fdatasync(fd_);
}

std::string TelemetryRecorder::last_samples() const {
  std::lock_guard lock(mutex_);
  std::string out = "telemetry in " + path_ + "; last samples: ";
  bool any = false;
  for (const std::string& s : last_) {
    if (s.empty()) continue;
    out += (any ? "; " : "") + s;
    any = true;
  }
  return any ? out : out + "none yet";
}

}  // namespace ls
