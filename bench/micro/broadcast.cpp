// broadcast benchmarks (see bench/micro/collective_harness.h): root 0's send into every rank's
// recv. Every rank has a send buffer with its own values, so reading the wrong one is caught.
// Size = the buffer; busbw = algbw.
#include "bench/micro/collective_harness.h"

namespace ls::bench {
namespace {

constexpr int kRoot = 0;

const CollectiveDef kBroadcast{
    .kind = CollectiveKind::kBroadcast,
    .bus_factor = [](int) { return 1.0; },
    .layout = [](size_t count, int) -> CollectiveLayout {
      count = count ? count : 1;
      return {count, count, count, count * sizeof(float)};
    },
    .fill_send =
        [](float* send, const CollectiveLayout& layout, int rank, int) {
          for (size_t i = 0; i < layout.send_count; ++i) send[i] = rank_value(rank, i);
        },
    .count_wrong = [](const float* recv, const CollectiveLayout& layout, int, int) -> size_t {
      size_t wrong = 0;
      for (size_t i = 0; i < layout.recv_count; ++i) wrong += recv[i] != rank_value(kRoot, i);
      return wrong;
    },
    .issue =
        [](Communicator& comm, const float* send, float* recv, const CollectiveLayout& layout,
           Stream& stream) {
          comm.broadcast(send, recv, layout.arg_count, DType::kF32, kRoot, stream);
        },
};

const bool kRegistered =
    add_registrar([](const BenchConfig& config) { register_collective(kBroadcast, config); });

}  // namespace
}  // namespace ls::bench
