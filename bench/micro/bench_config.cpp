// lockstep-bench's flags and benchmark registry (see bench/micro/bench_config.h).
#include "bench/micro/bench_config.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <string_view>

namespace ls::bench {
namespace {

std::vector<Registrar>& registrars() {
  static std::vector<Registrar> list;
  return list;
}

// Matches `--name VALUE` or `--name=VALUE` at argv[*i]; on a match stores VALUE, advances *i past
// it and returns true. A missing value leaves *value null.
bool take_flag(int argc, char** argv, int* i, std::string_view name, const char** value) {
  const std::string_view arg = argv[*i];
  if (arg == name) {
    *value = *i + 1 < argc ? argv[*i + 1] : nullptr;
    *i += *value ? 2 : 1;
    return true;
  }
  if (arg.size() > name.size() && arg.starts_with(name) && arg[name.size()] == '=') {
    *value = argv[*i] + name.size() + 1;
    *i += 1;
    return true;
  }
  return false;
}

bool parse_positive(const char* text, int* out) {
  const std::string_view s = text;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && *out >= 1;
}

}  // namespace

bool parse_bench_flags(int* argc, char** argv, BenchConfig* config) {
  std::string spec = "auto";
  int host_ranks = 0;
  int kept = 1;
  for (int i = 1; i < *argc;) {
    const char* value = nullptr;
    if (take_flag(*argc, argv, &i, "--devices", &value)) {
      if (!value || !*value) {
        std::fprintf(stderr,
                     "lockstep-bench: --devices needs a value (auto, host:N, cuda, cuda:0,1)\n");
        return false;
      }
      spec = value;
    } else if (take_flag(*argc, argv, &i, "--host-ranks", &value)) {
      if (!value || !parse_positive(value, &host_ranks)) {
        std::fprintf(stderr, "lockstep-bench: --host-ranks needs a positive integer, got '%s'\n",
                     value ? value : "");
        return false;
      }
    } else {
      argv[kept++] = argv[i++];
    }
  }
  *argc = kept;
  argv[kept] = nullptr;

  std::vector<Device> devices;
  try {
    devices = parse_devices(spec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lockstep-bench: bad --devices '%s': %s\n", spec.c_str(), e.what());
    return false;
  }
  config->gpu_count = cuda_availability().device_count;
  if (devices.front().is_cuda()) {
    config->cuda_devices = devices;
    config->host_devices = parse_devices("host");
  } else {
    config->host_devices = devices;
  }
  config->host_ranks = std::max(host_ranks, static_cast<int>(config->host_devices.size()));
  return true;
}

bool add_registrar(Registrar registrar) {
  registrars().push_back(std::move(registrar));
  return true;
}

void run_registrars(const BenchConfig& config) {
  for (const Registrar& registrar : registrars()) registrar(config);
}

std::vector<Device> first_devices(const std::vector<Device>& devices, int count) {
  return {devices.begin(), devices.begin() + count};
}

}  // namespace ls::bench
