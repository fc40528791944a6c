// reduce_scatter benchmarks (see bench/micro/collective_harness.h): rank r receives the sum of
// block r of every rank's send. Size = the full send buffer (n blocks); busbw = algbw * (n-1)/n.
#include <algorithm>

#include "bench/micro/collective_harness.h"

namespace ls::bench {
namespace {

const CollectiveDef kReduceScatter{
    .kind = CollectiveKind::kReduceScatter,
    .bus_factor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout = [](size_t count, int n) -> CollectiveLayout {
      const size_t block = std::max<size_t>(count / static_cast<size_t>(n), 1);
      const size_t full = block * static_cast<size_t>(n);
      return {full, block, block, full * sizeof(float)};
    },
    .fill_send =
        [](float* send, const CollectiveLayout& layout, int rank, int) {
          for (size_t i = 0; i < layout.send_count; ++i) send[i] = rank_value(rank, i);
        },
    .count_wrong = [](const float* recv, const CollectiveLayout& layout, int rank,
                      int n) -> size_t {
      const size_t offset = static_cast<size_t>(rank) * layout.recv_count;
      size_t wrong = 0;
      for (size_t j = 0; j < layout.recv_count; ++j) wrong += recv[j] != rank_sum(n, offset + j);
      return wrong;
    },
    .issue =
        [](Communicator& comm, const float* send, float* recv, const CollectiveLayout& layout,
           Stream& stream) {
          comm.reduce_scatter(send, recv, layout.arg_count, DType::kF32, ReduceOp::kSum, stream);
        },
};

const bool kRegistered =
    add_registrar([](const BenchConfig& config) { register_collective(kReduceScatter, config); });

}  // namespace
}  // namespace ls::bench
