// The GPU ceilings, registered only when cuda_availability() finds a GPU: device-to-device copy
// bandwidth on cuda:0 through the runtime's copy_async (cudaMemcpyAsync). GBps counts the bytes
// read plus the bytes written (twice the bytes copied), as the memory-bound kernels' GBps count
// theirs, so a kernel's GBps over this one is its share of what the memory delivers (nvbandwidth
// reports the bytes copied: half this). s_per_call is one copy's time. The GPU's GEMM rate is
// ceiling/gpu/gemm/... in gemm.cpp.
// Written against the backend-neutral runtime only, so it compiles in every build.
#include <benchmark/benchmark.h>

#include <string>

#include "bench/micro/bench_config.h"
#include "bench/micro/bench_util.h"
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>

namespace ls::bench {
namespace {

constexpr int kCopiesPerIteration = 10;

void run_d2d_copy(benchmark::State& state, Device device, size_t bytes) {
  DeviceRuntime& runtime = device_runtime(device);
  auto stream = runtime.create_stream();
  const auto count = static_cast<int64_t>(bytes / sizeof(float));
  const Tensor src = Tensor::empty({count}, DType::kF32, device);
  const Tensor dst = Tensor::empty({count}, DType::kF32, device);
  runtime.copy_async(dst.data(), src.data(), bytes, *stream);  // warm-up
  stream->synchronize();
  for (auto _ : state) {
    for (int i = 0; i < kCopiesPerIteration; ++i)
      runtime.copy_async(dst.data(), src.data(), bytes, *stream);
    stream->synchronize();
  }
  state.counters["GBps"] =
      benchmark::Counter(2.0 * static_cast<double>(bytes) * kCopiesPerIteration *
                             static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["size"] = static_cast<double>(bytes);
  report_time_per_call(state, kCopiesPerIteration);
}

void register_gpu_ceilings(const BenchConfig& config) {
  if (config.gpu_count == 0) return;
  const Device cuda0{DeviceKind::kCuda, 0};
  for (const size_t bytes : {size_t{64} << 20, size_t{256} << 20, size_t{1} << 30}) {
    const std::string name = "ceiling/gpu/d2d_copy/cuda:0/bytes:" + std::to_string(bytes);
    benchmark::RegisterBenchmark(name.c_str(), [cuda0, bytes](benchmark::State& state) {
      run_d2d_copy(state, cuda0, bytes);
    })->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

const bool kRegistered = add_registrar(register_gpu_ceilings);

}  // namespace
}  // namespace ls::bench
