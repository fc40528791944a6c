// Host kernel of ops/dropout.h: one enqueued task split over host_parallel_for; each element's
// mask bit depends only on (key, global row, position), never on the split. y may be x.
#include "ops/dropout.h"

#include <algorithm>

#include "ops/host/host_ops.h"

namespace ls {
namespace {

void dropout(const float* x, float* y, int64_t n, int64_t row_len, int64_t first_row,
             uint32_t threshold, float scale, uint64_t key, bool accumulate, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    int64_t row = b / row_len;
    int64_t pos = b - row * row_len;
    int64_t i = b;
    while (i < e) {
      const uint64_t row_hash = dropout_row_hash(key, static_cast<uint64_t>(first_row + row));
      const int64_t end = std::min(e, i + (row_len - pos));
      for (; i < end; ++i, ++pos) {
        const bool keep = dropout_bits(row_hash, static_cast<uint64_t>(pos)) >= threshold;
        const float v = keep ? x[i] * scale : 0.0f;
        y[i] = accumulate ? y[i] + v : v;
      }
      ++row;
      pos = 0;
    }
  });
}

const DropoutOps kHostDropout{
    .dropout = dropout,
};
LS_REGISTER_OP_TABLE(DropoutOps, DeviceKind::kHost, kHostDropout);

}  // namespace
}  // namespace ls
