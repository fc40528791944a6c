// all_reduce benchmarks (see bench/micro/collective_harness.h): sum of every rank's buffer into
// every rank's recv. Size = the per-rank buffer; busbw = algbw * 2(n-1)/n.
#include "bench/micro/collective_harness.h"

namespace ls::bench {
namespace {

const CollectiveDef kAllReduce{
    .kind = CollectiveKind::kAllReduce,
    .bus_factor = [](int n) { return 2.0 * (n - 1) / n; },
    .layout = [](size_t count, int) -> CollectiveLayout {
      count = count ? count : 1;
      return {count, count, count, count * sizeof(float)};
    },
    .fill_send =
        [](float* send, const CollectiveLayout& layout, int rank, int) {
          for (size_t i = 0; i < layout.send_count; ++i) send[i] = rank_value(rank, i);
        },
    .count_wrong = [](const float* recv, const CollectiveLayout& layout, int, int n) -> size_t {
      size_t wrong = 0;
      for (size_t i = 0; i < layout.recv_count; ++i) wrong += recv[i] != rank_sum(n, i);
      return wrong;
    },
    .issue =
        [](Communicator& comm, const float* send, float* recv, const CollectiveLayout& layout,
           Stream& stream) {
          comm.all_reduce(send, recv, layout.arg_count, DType::kF32, ReduceOp::kSum, stream);
        },
};

const bool kRegistered =
    add_registrar([](const BenchConfig& config) { register_collective(kAllReduce, config); });

}  // namespace
}  // namespace ls::bench
