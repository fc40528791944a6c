// lockstep-bench's own command-line flags and the registry through which each benchmark file
// registers its benchmarks once the flags are known.
//
// main() calls parse_bench_flags() before benchmark::Initialize: it parses lockstep-bench's flags
// with CLI11 (--devices as in every program, --host-ranks N) and leaves the rest in argv for
// Google Benchmark, then runs every registrar. Registrars call benchmark::RegisterBenchmark; they run once, in link order.
// Diagnostics go to stderr only: stdout belongs to Google Benchmark (--benchmark_format=json).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include <lockstep/device.h>

namespace ls::bench {

struct BenchConfig {
  // Collectives and data-parallel steps run on the first k devices of these lists, k = 1..size.
  std::vector<Device> host_devices;  // --devices host:N (default: one per core)
  std::vector<Device> cuda_devices;  // --devices cuda... or auto with usable GPUs; else empty
  // Host collectives also run with more ranks than host_devices (oversubscribed): up to this.
  int host_ranks = 1;
  // cuda_availability().device_count: the GPU ceilings run on cuda:0 when it is > 0.
  int gpu_count = 0;
};

// Parses lockstep-bench's flags and leaves in argv only what Google Benchmark is to read (with
// "--help" when help was asked: it prints its own after lockstep-bench's). Returns the exit code
// when the program should stop (2 after printing a usage error to stderr).
std::optional<int> parse_bench_flags(int* argc, char** argv, BenchConfig* config);

using Registrar = std::function<void(const BenchConfig&)>;
// Called from a namespace-scope initializer in each benchmark file: `const bool kRegistered =
// add_registrar(...)`. Returns true.
bool add_registrar(Registrar registrar);
void run_registrars(const BenchConfig& config);

// The first `count` devices of `devices`.
std::vector<Device> first_devices(const std::vector<Device>& devices, int count);

}  // namespace ls::bench
