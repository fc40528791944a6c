// Device names and the device-spec parser (see lockstep/device.h for the grammar).
#include <lockstep/device.h>

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <thread>

#include <lockstep/error.h>

namespace ls {
namespace {

constexpr std::string_view kSpecHelp =
    "valid specs: auto, host, host:N (N host devices), cuda, cuda:I,J,... (GPU indices)";

int parse_int(std::string_view text, std::string_view spec) {
  int value = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  LS_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
           "device spec '", spec, "': '", text, "' is not a number; ", kSpecHelp);
  return value;
}

std::vector<Device> host_devices(int count) {
  std::vector<Device> devices;
  for (int i = 0; i < count; ++i) devices.push_back({DeviceKind::kHost, i});
  return devices;
}

std::vector<Device> all_gpus(std::string_view spec) {
  CudaAvailability cuda = cuda_availability();
  LS_CHECK(cuda.device_count > 0, "device spec '", spec, "' asks for GPUs but none is usable: ",
           cuda.reason_unavailable, ". Use --devices host:N to train on CPU cores.");
  std::vector<Device> devices;
  for (int i = 0; i < cuda.device_count; ++i) devices.push_back({DeviceKind::kCuda, i});
  return devices;
}

std::vector<Device> listed_gpus(std::string_view list, std::string_view spec) {
  CudaAvailability cuda = cuda_availability();
  LS_CHECK(cuda.device_count > 0, "device spec '", spec, "' asks for GPUs but none is usable: ",
           cuda.reason_unavailable, ". Use --devices host:N to train on CPU cores.");
  std::vector<Device> devices;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = std::min(list.find(',', start), list.size());
    int index = parse_int(list.substr(start, comma - start), spec);
    LS_CHECK(index >= 0 && index < cuda.device_count, "device spec '", spec, "': GPU ", index,
             " does not exist; this machine has ", cuda.device_count, " GPU(s), cuda:0..cuda:",
             cuda.device_count - 1);
    Device device{DeviceKind::kCuda, index};
    LS_CHECK(std::find(devices.begin(), devices.end(), device) == devices.end(), "device spec '",
             spec, "' lists ", device.str(), " twice; each device can hold one replica");
    devices.push_back(device);
    start = comma + 1;
  }
  return devices;
}

}  // namespace

std::string_view device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::kHost ? "host" : "cuda";
}

std::string Device::str() const {
  std::string out(device_kind_name(kind));
  out += ':';
  out += std::to_string(index);
  return out;
}

int host_core_count() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<Device> parse_devices(std::string_view spec) {
  if (spec == "auto") {
    if (cuda_availability().device_count > 0) return all_gpus(spec);
    return host_devices(host_core_count());
  }
  if (spec == "host") return host_devices(host_core_count());
  if (spec == "cuda") return all_gpus(spec);
  if (spec.starts_with("host:")) {
    int count = parse_int(spec.substr(5), spec);
    LS_CHECK(count >= 1, "device spec '", spec,
             "': host:N needs N >= 1 (N is the number of host devices, e.g. host:2)");
    LS_CHECK(count <= 4096, "device spec '", spec, "': ", count,
             " host devices is more than the 4096 lockstep supports");
    return host_devices(count);
  }
  if (spec.starts_with("cuda:")) return listed_gpus(spec.substr(5), spec);
  LS_THROW("unknown device spec '", spec, "'; ", kSpecHelp);
}

std::string devices_str(const std::vector<Device>& devices) {
  std::string out;
  for (const Device& d : devices) {
    if (!out.empty()) out += ',';
    out += d.str();
  }
  return out;
}

}  // namespace ls
