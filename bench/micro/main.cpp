// lockstep-bench's entry point: Google Benchmark's own flags (--benchmark_filter,
// --benchmark_format=json, ...) work as usual. Host devices use one core each, and BLAS is kept
// single-threaded, so every figure is a per-core figure unless its name says otherwise.
#include <benchmark/benchmark.h>
#include <cblas.h>

int main(int argc, char** argv) {
  openblas_set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
