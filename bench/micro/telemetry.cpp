// What training telemetry costs (parallel/observability/telemetry.h):
//   telemetry/host/devices:2   a recorder sampling 2 host devices every 1 ms for 2 s, while the
//                              benchmark thread sleeps. Counters:
//     cpu_us_per_round   process CPU time per round of samples (every device once: JSON,
//                        write, fdatasync); the sampler is the only thread at work
//     wall_us_per_round  wall time per round: the 1 ms wait between rounds plus the round
//                        itself (fdatasync waits for the disk, not the CPU)
//     cost_pct_at_1s     cpu_us_per_round / 1 s: the fraction of one core a 1 s interval takes
//                        from training, which is also its share of every step's time
// Measured this way because an A/B of whole training runs cannot resolve a cost this small on
// a shared machine (run-to-run spread is tens of percent; docs/benchmarks.md).
#include <benchmark/benchmark.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <lockstep/device.h>
#include "parallel/observability/telemetry.h"

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

void BM_telemetry(benchmark::State& state) {
  const std::vector<ls::Device> devices = ls::parse_devices("host:2");
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("lockstep-bench-telemetry-" + std::to_string(::getpid()) + ".jsonl"))
                               .string();
  constexpr auto kRun = std::chrono::seconds(2);
  double cpu = 0, wall = 0;
  int64_t rounds = 0;
  for (auto _ : state) {
    std::filesystem::remove(path);
    const double cpu_start = process_cpu_seconds();
    const auto wall_start = std::chrono::steady_clock::now();
    int64_t samples = 0;
    {
      ls::TelemetryRecorder recorder(path, std::chrono::milliseconds(1), devices);
      std::this_thread::sleep_for(kRun);
      samples = recorder.samples_written();
    }
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
    cpu += process_cpu_seconds() - cpu_start;
    rounds += samples / static_cast<int64_t>(devices.size());
  }
  std::filesystem::remove(path);
  const double cpu_us = cpu * 1e6 / static_cast<double>(rounds);
  state.counters["cpu_us_per_round"] = cpu_us;
  state.counters["wall_us_per_round"] = wall * 1e6 / static_cast<double>(rounds);
  state.counters["cost_pct_at_1s"] = cpu_us / 1e6 * 100;
}
BENCHMARK(BM_telemetry)->Name("telemetry/host/devices:2")->Iterations(1)->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
