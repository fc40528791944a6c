// A breakdown of the FORMER two-phase host all-reduce into its memory phases, kept to compare
// algorithms (the current one, Note [Host all-reduce in place], is one phase: each rank reduces
// its chunk straight into every rank's recv). For a 2-rank all-reduce of `bytes`, each rank
//   phase 1 reduces its half: reads both ranks' halves, writes its recv half (host_reduce)
//   phase 2 copies the peer's reduced half into its own recv (host_copy)
// with a barrier after each. Benchmarks (single-threaded unless said; the kernels are called
// directly, outside any stream, so they run inline on the benchmark thread):
//   phases/host_reduce/ranks:N/bytes:B   phase 1 of one rank of N alone (chunk = B / N)
//   phases/host_copy/bytes:B             phase 2 of one rank alone
//   phases/both/threads:2/bytes:B        both ranks' phases 1 and 2 on two plain threads with
//                                        std::barrier: the all-reduce without streams, clique
//                                        or dispatch (its algorithm and kernels only)
#include <benchmark/benchmark.h>

#include <barrier>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "bench/micro/bench_config.h"
#include "parallel/host/host_reduce.h"

namespace ls::bench {
namespace {

using Clock = std::chrono::steady_clock;

// time_us: one call; traffic_GBps: bytes read + written per second (memcpy's is twice its
// GBps); busbw_GBps: the all-reduce's busbw if it took this long (2 ranks: busbw = algbw).
void set_counters(benchmark::State& state, double seconds, size_t traffic, size_t bytes) {
  const double per_call = seconds / static_cast<double>(state.iterations());
  state.counters["time_us"] = per_call * 1e6;
  if (traffic) state.counters["traffic_GBps"] = static_cast<double>(traffic) / per_call / 1e9;
  if (bytes) state.counters["busbw_GBps"] = static_cast<double>(bytes) / per_call / 1e9;
}

// Phase 1 of one rank of an n-rank all-reduce of `bytes`: reduce one chunk of n inputs.
void run_reduce(benchmark::State& state, int ranks, size_t bytes) {
  const size_t count = bytes / sizeof(float), chunk = count / static_cast<size_t>(ranks);
  std::vector<std::vector<float>> in;
  std::vector<const void*> inputs;
  for (int k = 0; k < ranks; ++k) in.emplace_back(count, static_cast<float>(k + 1));
  for (const auto& v : in) inputs.push_back(v.data());
  std::vector<float> out(chunk, 0.0f);
  double seconds = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    host_reduce(inputs.data(), ranks, 0, out.data(), chunk, DType::kF32, ReduceOp::kSum);
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    benchmark::DoNotOptimize(out.data());
  }
  set_counters(state, seconds, (static_cast<size_t>(ranks) + 1) * chunk * sizeof(float), 0);
}

// Phase 2 of one rank of a 2-rank all-reduce: copy the peer's half.
void run_copy(benchmark::State& state, size_t bytes) {
  const size_t half = bytes / 2;
  std::vector<char> src(half, 1), dst(half, 0);
  double seconds = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    host_copy(dst.data(), src.data(), half);
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    benchmark::DoNotOptimize(dst.data());
  }
  set_counters(state, seconds, 2 * half, 0);
}

void run_both(benchmark::State& state, size_t bytes) {
  const size_t count = bytes / sizeof(float), half = count / 2;
  std::vector<float> send[2] = {std::vector<float>(count, 1.0f), std::vector<float>(count, 2.0f)};
  std::vector<float> recv[2] = {std::vector<float>(count, 0.0f), std::vector<float>(count, 0.0f)};
  const void* inputs[2] = {send[0].data(), send[1].data()};
  double seconds = 0;
  for (auto _ : state) {
    std::barrier sync(3);  // two ranks and this thread: start together
    auto rank = [&](int r) {
      const size_t mine = static_cast<size_t>(r) * half, theirs = static_cast<size_t>(1 - r) * half;
      sync.arrive_and_wait();
      host_reduce(inputs, 2, mine, recv[r].data() + mine, half, DType::kF32, ReduceOp::kSum);
      sync.arrive_and_wait();
      host_copy(recv[r].data() + theirs, recv[1 - r].data() + theirs, half * sizeof(float));
      sync.arrive_and_wait();
    };
    std::thread r0(rank, 0), r1(rank, 1);
    const auto start = Clock::now();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    seconds += std::chrono::duration<double>(Clock::now() - start).count();
    r0.join();
    r1.join();
  }
  set_counters(state, seconds, 0, bytes);
}

void register_phases(const BenchConfig&) {
  for (const size_t bytes : {size_t{16} << 20, size_t{64} << 20}) {
    const std::string b = std::to_string(bytes);
    for (const int ranks : {2, 4}) {
      benchmark::RegisterBenchmark(
          ("phases/host_reduce/ranks:" + std::to_string(ranks) + "/bytes:" + b).c_str(),
          [ranks, bytes](benchmark::State& s) { run_reduce(s, ranks, bytes); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond);
    }
    benchmark::RegisterBenchmark(("phases/host_copy/bytes:" + b).c_str(),
                                 [bytes](benchmark::State& s) { run_copy(s, bytes); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("phases/both/threads:2/bytes:" + b).c_str(),
                                 [bytes](benchmark::State& s) { run_both(s, bytes); })
        ->UseRealTime()->Unit(benchmark::kMicrosecond);
  }
}

const bool kRegistered = add_registrar(register_phases);

}  // namespace
}  // namespace ls::bench
