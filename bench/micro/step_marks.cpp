// What issue 25's measurements cost a step: the clock stamps every step writes on every device
// (the step's five marks and two per gradient launch: the verdict, always on) and, while a run
// is traced, four per layer (DeviceLayerClock):
//   stamp/<device>         stamp_device_clock on the compute stream, 1000 per iteration, then
//                          one wait: ns_per_stamp is enqueueing and running one stamp
//   layer_clock/<device>   DeviceLayerClock::stamp (the stamp plus its name kept on the host),
//                          1000 per step body as the engine calls them
// A stamp's cost times the stamps of a step, against that step's time, is the overhead
// (docs/benchmarks.md): measured this way because an A/B of whole training runs cannot resolve
// a cost this small on a shared machine.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <string>

#include "bench/micro/bench_config.h"
#include "engine/core/runtime.h"
#include "ops/step_control.h"
#include "parallel/observability/layer_clock.h"

namespace ls::bench {
namespace {

constexpr int kStampsPerIteration = 1000;

void report(benchmark::State& state, double seconds) {
  state.counters["ns_per_stamp"] =
      1e9 * seconds / static_cast<double>(state.iterations() * kStampsPerIteration);
}

void run_stamps(benchmark::State& state, Device device) {
  std::unique_ptr<Stream> stream = device_runtime(device).create_stream();
  const Tensor marks = Tensor::empty({2 * kStampsPerIteration}, DType::kI32, device);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int32_t i = 0; i < kStampsPerIteration; ++i) stamp_device_clock(marks, i, *stream);
    stream->synchronize();
  }
  report(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void run_layer_clock(benchmark::State& state, Device device) {
  std::unique_ptr<Stream> stream = device_runtime(device).create_stream();
  DeviceLayerClock clock(device);
  static_assert(kStampsPerIteration <= DeviceLayerClock::kCapacity);
  const std::string name = "h.11";
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    clock.begin_step();
    for (int i = 0; i < kStampsPerIteration; ++i) {
      clock.stamp(name, static_cast<LayerPoint>(i % 4), *stream);
    }
    stream->synchronize();
  }
  report(state, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void register_step_marks(const BenchConfig& config) {
  std::vector<Device> devices = {Device{DeviceKind::kHost, 0}};
  if (config.gpu_count > 0) devices.push_back(Device{DeviceKind::kCuda, 0});
  for (const Device& device : devices) {
    benchmark::RegisterBenchmark(("stamp/" + device.str()).c_str(),
                                 [=](benchmark::State& st) { run_stamps(st, device); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("layer_clock/" + device.str()).c_str(),
                                 [=](benchmark::State& st) { run_layer_clock(st, device); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

const bool kRegistered = add_registrar(register_step_marks);

}  // namespace
}  // namespace ls::bench
