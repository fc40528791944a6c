// The ceilings every other figure is compared against, measured in the same run:
//   ceiling/memcpy/<bytes>            single-thread memcpy; GBps = bytes copied / time (10^9)
//   ceiling/memcpy/<bytes>/threads:2  two threads copying their own buffers at once; GBps is
//                                     their sum: the memory bandwidth two ranks share
//   ceiling/sgemm/1024                single-core sgemm GFLOP/s straight from CBLAS
//   ceiling/sgemm/1024/threads:2      two single-threaded sgemms at once, GFLOPs summed: what
//                                     two host devices can compute together (the bound on
//                                     2-device scaling efficiency is this / (2 * single-core))
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <vector>

namespace {

void BM_ceiling_memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(bytes));
  state.counters["GBps"] = benchmark::Counter(
      static_cast<double>(bytes) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ceiling_memcpy)->Name("ceiling/memcpy")->Arg(16 << 20)->Arg(64 << 20)->UseRealTime();
BENCHMARK(BM_ceiling_memcpy)->Name("ceiling/memcpy")->Arg(16 << 20)->Arg(64 << 20)->Threads(2)
    ->UseRealTime();

void BM_ceiling_sgemm(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> a(static_cast<size_t>(n) * n, 1.0f), b(a), c(a);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ceiling_sgemm)->Name("ceiling/sgemm")->Arg(1024)->UseRealTime();
BENCHMARK(BM_ceiling_sgemm)->Name("ceiling/sgemm")->Arg(1024)->Threads(2)->UseRealTime();

}  // namespace
