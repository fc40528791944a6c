// The shared harness of the collective benchmarks (all_reduce.cpp, reduce_scatter.cpp, ...).
//
// A benchmark runs one collective, f32, out of place, on N ranks. Each rank's calls are issued
// from its own long-lived thread on its own stream, as replicas do; threads, streams and
// communicators are made once per device list and reused across sizes and collectives. One
// iteration = every rank issues `ops` collectives back to back, then synchronizes its stream; it
// is timed with steady_clock from before the first issue to after the last rank is done.
// After the timed loop every rank's result is compared with the exact answer (inputs are small
// integers, so f32 sums are exact) and the mismatches are counted in `wrong`.
// Counters (nccl-tests' columns): size (bytes, below), count (size / 4), time_us (one
// collective), algbw_GBps = size / time_us, busbw_GBps = algbw * bus_factor(N), wrong.
// Bytes follow nccl-tests: the per-rank buffer for all_reduce and broadcast, the full (N-block)
// recv buffer for all_gather and the full send buffer for reduce_scatter.
#pragma once

#include <cstddef>

#include "bench/micro/bench_config.h"
#include <lockstep/stream.h>
#include "parallel/comm/communicator.h"

namespace ls::bench {

// Buffer sizes, in f32 elements, of one collective at one nominal size on N ranks.
struct CollectiveLayout {
  size_t send_count = 0;  // each rank's send buffer
  size_t recv_count = 0;  // each rank's recv buffer
  size_t arg_count = 0;   // the count argument of the call
  size_t bytes = 0;       // what algbw divides (see the file comment)
};

// What a collective's file tells the harness. Plain functions, so the fill and check loops of
// each collective are compiled in its own file with the element formula inlined.
struct CollectiveDef {
  CollectiveKind kind = CollectiveKind::kAllReduce;
  double (*bus_factor)(int n) = nullptr;
  // The layout for a nominal size of `count` elements (blocks are at least one element).
  CollectiveLayout (*layout)(size_t count, int n) = nullptr;
  // Fills rank's send buffer (layout.send_count elements) with its inputs.
  void (*fill_send)(float* send, const CollectiveLayout& layout, int rank, int n) = nullptr;
  // Counts the elements of rank's recv buffer that differ from the exact answer.
  size_t (*count_wrong)(const float* recv, const CollectiveLayout& layout, int rank,
                        int n) = nullptr;
  void (*issue)(Communicator& comm, const float* send, float* recv, const CollectiveLayout& layout,
                Stream& stream) = nullptr;
};

// Registers `def` at every size, on host ranks 1..config.host_ranks and on the first
// 1..size() of config.cuda_devices. Names: all_reduce/host/devices:2/bytes:67108864.
void register_collective(const CollectiveDef& def, const BenchConfig& config);

// Destroys the cached threads, streams, communicators and buffers (main() calls it at exit).
void release_rank_groups();

// Rank r's input element i: (r + 1) * 16 + i % 16. Small integers: sums over up to 512 ranks
// are exact in f32, and every rank's block differs from every other's.
inline float rank_value(int rank, size_t i) {
  return static_cast<float>((rank + 1) * 16 + static_cast<int>(i % 16));
}
// The exact sum over n ranks of rank_value(r, i).
inline float rank_sum(int n, size_t i) {
  return static_cast<float>(8 * n * (n + 1) + n * static_cast<int>(i % 16));
}

}  // namespace ls::bench
