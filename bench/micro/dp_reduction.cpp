// One data-parallel training step on 2 devices with the gradient reduction's options
// (BucketOptions::fuse_ready and reduce_dtype), 128 rows per device, SGD:
//   dp_reduction/<model>/<backend>/fuse:F/dtype:D   F in {0, 1}, D in {f32, bf16}
// Models: mlp784-1024-1024-10 with the default bucket caps (few large buckets: bf16 halves the
// bytes) and mlp256x8 with 64 KiB caps (14 small buckets: fusion halves the launches).
// Counters: step_ms, launches (group calls and ungrouped collectives per step), collectives
// and buckets per step. Needs 2 devices of the backend (host: --devices host:2 or more cores).
#include <benchmark/benchmark.h>

#include <chrono>
#include <string>
#include <vector>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include <lockstep/data_parallel.h>

namespace ls::bench {
namespace {

constexpr int64_t kRowsPerDevice = 128;

struct ReductionModel {
  std::string name;
  std::vector<int64_t> widths;
  BucketOptions buckets;  // caps only; the benchmark sets the options it compares
};

std::vector<ReductionModel> models() {
  BucketOptions small;
  small.cap_bytes = small.first_bucket_bytes = 64 << 10;
  return {{"mlp784-1024-1024-10", mlp_widths(1024), BucketOptions{}},
          {"mlp256x8", {256, 256, 256, 256, 256, 256, 256, 256, 10}, small}};
}

void run_reduction_step(benchmark::State& state, const std::vector<Device>& devices,
                        const ReductionModel& model, bool fuse, DType dtype) {
  DataParallelOptions options;
  options.buckets = model.buckets;
  options.buckets.fuse_ready = fuse;
  options.buckets.reduce_dtype = dtype;
  const auto n = static_cast<int64_t>(devices.size());
  const data::Batch batch = random_batch(kRowsPerDevice * n, model.widths.front());
  DataParallel trainer(devices, mlp_factory(model.widths),
                       make_optimizer_factory({"sgd", 0.01f, 0.9f, 0.0f}), options);
  trainer.step(batch);  // warm-up: fills the allocators' caches
  trainer.step(batch);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(trainer.step(batch).loss);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const BucketTimeline timeline = trainer.last_timeline(0);
  state.counters["step_ms"] = 1e3 * seconds / static_cast<double>(state.iterations());
  state.counters["launches"] = timeline.launches;
  state.counters["collectives"] = timeline.collectives;
  state.counters["buckets"] = static_cast<double>(trainer.buckets().size());
}

void register_on(const std::string& backend, const std::vector<Device>& devices) {
  if (devices.size() < 2) return;  // a reduction needs two devices
  const std::vector<Device> pair = first_devices(devices, 2);
  for (const ReductionModel& model : models()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (bool fuse : {false, true}) {
        const std::string name = "dp_reduction/" + model.name + "/" + backend +
                                 "/fuse:" + (fuse ? "1" : "0") +
                                 "/dtype:" + std::string(dtype_name(dtype));
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& state) { run_reduction_step(state, pair, model, fuse, dtype); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

void register_reduction_steps(const BenchConfig& config) {
  register_on("host", config.host_devices);
  if (!config.cuda_devices.empty()) register_on("cuda", config.cuda_devices);
}

const bool kRegistered = add_registrar(register_reduction_steps);

}  // namespace
}  // namespace ls::bench
