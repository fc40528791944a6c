// all_gather benchmarks (see bench/micro/collective_harness.h): every rank's recv holds block k
// = rank k's send. Size = the full recv buffer (n blocks); busbw = algbw * (n-1)/n.
#include <algorithm>

#include "bench/micro/collective_harness.h"

namespace ls::bench {
namespace {

const CollectiveDef kAllGather{
    .kind = CollectiveKind::kAllGather,
    .bus_factor = [](int n) { return static_cast<double>(n - 1) / n; },
    .layout = [](size_t count, int n) -> CollectiveLayout {
      const size_t block = std::max<size_t>(count / static_cast<size_t>(n), 1);
      const size_t full = block * static_cast<size_t>(n);
      return {block, full, block, full * sizeof(float)};
    },
    .fill_send =
        [](float* send, const CollectiveLayout& layout, int rank, int) {
          for (size_t i = 0; i < layout.send_count; ++i) send[i] = rank_value(rank, i);
        },
    .count_wrong = [](const float* recv, const CollectiveLayout& layout, int, int n) -> size_t {
      size_t wrong = 0;
      for (int k = 0; k < n; ++k) {
        const float* block = recv + static_cast<size_t>(k) * layout.send_count;
        for (size_t j = 0; j < layout.send_count; ++j) wrong += block[j] != rank_value(k, j);
      }
      return wrong;
    },
    .issue =
        [](Communicator& comm, const float* send, float* recv, const CollectiveLayout& layout,
           Stream& stream) {
          comm.all_gather(send, recv, layout.arg_count, DType::kF32, stream);
        },
};

const bool kRegistered =
    add_registrar([](const BenchConfig& config) { register_collective(kAllGather, config); });

}  // namespace
}  // namespace ls::bench
