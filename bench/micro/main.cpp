// lockstep-bench's entry point. Google Benchmark's own flags (--benchmark_filter,
// --benchmark_format=json, ...) work as usual; lockstep-bench adds two, parsed with CLI11 before
// Google Benchmark sees the rest (see bench/micro/bench_config.h):
//   --devices SPEC   devices for the collectives and data-parallel steps (default auto: every
//                    usable GPU, else one host device per core)
//   --host-ranks N   also run the host collectives with up to N ranks (more than the cores)
// Host devices use one core each, and BLAS is kept single-threaded, so every figure is a
// per-core figure unless its name says otherwise.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <optional>

#include "bench/micro/bench_config.h"
#include "bench/micro/collective_harness.h"

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  ls::bench::BenchConfig config;
  if (const std::optional<int> exit_code = ls::bench::parse_bench_flags(&argc, argv, &config))
    return *exit_code;
  ls::bench::run_registrars(config);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  // Threads, streams and communicators of the collectives go before static destruction (the
  // CUDA runtime and NCCL must still be up when their communicators are destroyed).
  ls::bench::release_rank_groups();
  return 0;
}
