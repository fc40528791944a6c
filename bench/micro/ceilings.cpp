// The ceilings every other figure is compared against, measured in the same run:
//   ceiling/memcpy/<bytes>            single-thread memcpy; GBps = bytes copied / time (10^9)
//   ceiling/memcpy/<bytes>/threads:2  two threads copying their own buffers at once; GBps is
//                                     their sum: the memory bandwidth two ranks share
//   ceiling/sgemm/1024                single-core sgemm GFLOP/s straight from CBLAS (the label
//                                     names OpenBLAS's kernels: "Prescott" are its generic ones,
//                                     Note [OpenBLAS on CPUs newer than it] in ops/host/gemm.cpp)
//   ceiling/sgemm/1024/threads:2      two single-threaded sgemms at once, GFLOPs summed: what
//                                     two host devices can compute together (the bound on
//                                     2-device scaling efficiency is this / (2 * single-core))
//   ceiling/bf16gemm/1024             single-core bf16 GEMM (f32 accumulation, f32 C) through
//                                     oneDNN on the CPU's bf16 units: the ceiling of the bf16
//                                     step's GEMMs (the label names oneDNN's kernel); registered
//                                     only where the build has oneDNN and the CPU bf16 units
//   ceiling/bf16gemm/1024/threads:2   two at once, GFLOPs summed
//   ceiling/onednn-f32/1024           single-core f32 GEMM through oneDNN, the f32 path of the
//                                     step's GEMMs on AVX-512 CPUs; registered where available
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
#include <string>
#include <vector>

#include <lockstep/dtype.h>
#include "ops/host/onednn_matmul.h"

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
  state.SetLabel(std::string("OpenBLAS ") + openblas_get_corename());
}
BENCHMARK(BM_ceiling_sgemm)->Name("ceiling/sgemm")->Arg(1024)->UseRealTime();
BENCHMARK(BM_ceiling_sgemm)->Name("ceiling/sgemm")->Arg(1024)->Threads(2)->UseRealTime();

// A square oneDNN product of `type` operands (f32 C).
void BM_ceiling_onednn(benchmark::State& state, ls::onednn::OperandType type) {
  const int64_t n = state.range(0);
  const size_t elements = static_cast<size_t>(n * n);
  const std::vector<uint16_t> a16(elements, ls::f32_to_bf16(1.0f));
  const std::vector<float> a32(elements, 1.0f);
  const bool bf16 = type == ls::onednn::OperandType::kBF16;
  const void* a = bf16 ? static_cast<const void*>(a16.data()) : a32.data();
  std::vector<float> c(elements);
  const ls::onednn::MatmulShape shape{.operands = type, .m = n, .n = n, .k = n, .lda = n,
                                      .ldb = n, .ldc = n, .stride_a = n * n, .stride_b = n * n,
                                      .stride_c = n * n};
  ls::onednn::matmul(shape, a, a, c.data());  // builds the primitive
  for (auto _ : state) {
    ls::onednn::matmul(shape, a, a, c.data());
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2.0 * n * n * n * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.SetLabel(ls::onednn::implementation(shape));
}
const bool kOnednnCeilingsRegistered = [] {
  using ls::onednn::OperandType;
  if (ls::onednn::native_bf16_available()) {
    benchmark::RegisterBenchmark("ceiling/bf16gemm", BM_ceiling_onednn, OperandType::kBF16)
        ->Arg(1024)->UseRealTime();
    benchmark::RegisterBenchmark("ceiling/bf16gemm", BM_ceiling_onednn, OperandType::kBF16)
        ->Arg(1024)->Threads(2)->UseRealTime();
  }
  if (ls::onednn::f32_available()) {
    benchmark::RegisterBenchmark("ceiling/onednn-f32", BM_ceiling_onednn, OperandType::kF32)
        ->Arg(1024)->UseRealTime();
  }
  return true;
}();

}  // namespace
