// lockstep-bench's flags and benchmark registry (see bench/micro/bench_config.h).
#include "bench/micro/bench_config.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "programs/common/cli.h"
#include "programs/common/flags.h"

namespace ls::bench {
namespace {

std::vector<Registrar>& registrars() {
  static std::vector<Registrar> list;
  return list;
}

}  // namespace

std::optional<int> parse_bench_flags(int* argc, char** argv, BenchConfig* config) {
  std::string spec = "auto";
  int host_ranks = 0;
  bool help = false;
  CLI::App app("Microbenchmarks of lockstep's ops, ceilings, collectives and training steps; "
               "Google Benchmark's flags (--benchmark_filter=..., --benchmark_format=json, ...) "
               "work as usual.",
               "lockstep-bench");
  app.allow_extras();  // Google Benchmark's flags, passed on in order
  app.set_help_flag();
  app.add_flag("-h,--help", help, "this help, then Google Benchmark's");
  ls::cli::add_devices(app, spec);
  app.add_option("--host-ranks", host_ranks,
                 "also run the host collectives on up to N ranks (oversubscribed)")
      ->check(ls::cli::positive());
  if (const std::optional<int> exit_code = ls::cli::parse(app, *argc, argv)) return exit_code;
  std::vector<std::string> rest = app.remaining();
  if (help) {
    std::printf("%s\n", app.help().c_str());
    rest.emplace_back("--help");  // Google Benchmark prints its own and exits
  }
  // argv keeps the program's name, then the arguments Google Benchmark is to see.
  static std::vector<std::string> kept;  // argv points into it until the program ends
  kept = std::move(rest);
  *argc = 1;
  for (std::string& arg : kept) argv[(*argc)++] = arg.data();
  argv[*argc] = nullptr;

  std::vector<Device> devices;
  try {
    devices = ls::cli::devices_of("--devices", spec);
  } catch (const ls::cli::UsageError& e) {
    return ls::cli::usage_error(app, e.what());
  }
  config->gpu_count = cuda_availability().device_count;
  if (devices.front().is_cuda()) {
    config->cuda_devices = devices;
    config->host_devices = parse_devices("host");
  } else {
    config->host_devices = devices;
  }
  config->host_ranks = std::max(host_ranks, static_cast<int>(config->host_devices.size()));
  return std::nullopt;
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
