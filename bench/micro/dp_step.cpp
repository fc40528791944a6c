// One data-parallel training step of the 784-1024-1024-10 MLP (AdamW) on 1..N devices, weak
// scaling: every device gets 128 rows, so the global batch is 128 * N.
//   dp_step/mlp784-1024-1024-10/host/devices:N   host:0..N-1 (N up to --devices' host count)
//   dp_step/mlp784-1024-1024-10/cuda/devices:N   the first N devices of --devices (GPUs only)
// Counters: samples_per_s (global batch / step time), step_ms, and efficiency =
// samples_per_s(N) / (N * samples_per_s(1)) when devices:1 of the same backend ran earlier in
// this process (the median of its runs; on devices:1 itself, or with devices:1 filtered out, the
// counter is left out).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include <lockstep/data_parallel.h>

namespace ls::bench {
namespace {

constexpr int64_t kRowsPerDevice = 128;

// samples_per_s of every devices:1 run so far, per backend.
std::map<std::string, std::vector<double>>& one_device_runs() {
  static std::map<std::string, std::vector<double>> runs;
  return runs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t h = v.size() / 2;
  return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

void run_dp_step(benchmark::State& state, const std::string& backend,
                 const std::vector<Device>& devices) {
  const auto n = static_cast<int64_t>(devices.size());
  const data::Batch batch = random_batch(kRowsPerDevice * n, 784);
  DataParallel trainer(devices, mlp_factory(mlp_widths(1024)), make_optimizer_factory({}));
  trainer.step(batch);  // warm-up: fills the allocators' caches
  trainer.step(batch);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step(batch).loss);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double iterations = static_cast<double>(state.iterations());
  const double samples_per_s = static_cast<double>(batch.size) * iterations / seconds;
  state.counters["samples_per_s"] = samples_per_s;
  state.counters["step_ms"] = 1e3 * seconds / iterations;
  std::vector<double>& one = one_device_runs()[backend];
  if (n == 1) one.push_back(samples_per_s);
  if (n > 1 && !one.empty()) {
    state.counters["efficiency"] = samples_per_s / (static_cast<double>(n) * median(one));
  }
}

void register_on(const std::string& backend, const std::vector<Device>& devices) {
  for (int n = 1; n <= static_cast<int>(devices.size()); ++n) {
    const std::vector<Device> ranks = first_devices(devices, n);
    const std::string name =
        "dp_step/mlp784-1024-1024-10/" + backend + "/devices:" + std::to_string(n);
    benchmark::RegisterBenchmark(name.c_str(), [backend, ranks](benchmark::State& state) {
      run_dp_step(state, backend, ranks);
    })->UseRealTime()->Unit(benchmark::kMillisecond);
  }
}

void register_dp_steps(const BenchConfig& config) {
  register_on("host", config.host_devices);
  if (!config.cuda_devices.empty()) register_on("cuda", config.cuda_devices);
}

const bool kRegistered = add_registrar(register_dp_steps);

}  // namespace
}  // namespace ls::bench
