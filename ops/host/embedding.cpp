// Host kernels of ops/embedding.h. Ids are validated on the stream's worker before any output is
// written; an out-of-range id raises an ls::Error (naming the position and the id) that surfaces
// at the stream's next synchronize(), with the CUDA kernels' message. The lookup splits ids over
// the cores; the gradient splits table columns only, so every table row receives its
// contributions in increasing i (bitwise the same as one sequential loop, whatever the split).
#include "ops/embedding.h"

#include <algorithm>
#include <cstring>

#include "engine/core/device_fault.h"
#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// The same message as the CUDA kernels' (engine/core/device_fault.h).
void check_ids(const char* op, const int32_t* ids, int64_t n, int64_t vocab) {
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) [[unlikely]] {
      LS_THROW(describe_out_of_range(op, "id", i, ids[i], vocab, kEmbeddingIdHint));
    }
  }
}

void embedding(const float* table, const int32_t* ids, int64_t n, int64_t vocab, int64_t dim,
               float* out, Stream& stream) {
  LS_ASSERT(n >= 0 && vocab > 0 && dim > 0, "embedding sizes n=", n, " vocab=", vocab,
            " dim=", dim);
  if (n == 0) return;
  const int64_t grain = std::max<int64_t>(1, kHostGrain / dim);
  host_enqueue(stream, [=] {
    check_ids("embedding", ids, n, vocab);
    host_parallel_for(0, n, grain, [=](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        std::memcpy(out + i * dim, table + static_cast<int64_t>(ids[i]) * dim,
                    static_cast<size_t>(dim) * sizeof(float));
      }
    });
  });
}

void embedding_backward(const float* dy, const int32_t* ids, int64_t n, int64_t vocab, int64_t dim,
                        float* dtable, Stream& stream) {
  LS_ASSERT(n >= 0 && vocab > 0 && dim > 0, "embedding_backward sizes n=", n, " vocab=", vocab,
            " dim=", dim);
  if (n == 0) return;
  // Column blocks of at least 64 floats (a few cache lines per row touched).
  const int64_t grain = std::max<int64_t>(64, kHostGrain / n);
  host_enqueue(stream, [=] {
    check_ids("embedding_backward", ids, n, vocab);
    host_parallel_for(0, dim, grain, [=](int64_t c0, int64_t c1) {
      for (int64_t i = 0; i < n; ++i) {
        float* __restrict row = dtable + static_cast<int64_t>(ids[i]) * dim;
        const float* __restrict g = dy + i * dim;
        for (int64_t c = c0; c < c1; ++c) row[c] += g[c];
      }
    });
  });
}

const EmbeddingOps kHostEmbedding{
    .embedding = embedding,
    .embedding_backward = embedding_backward,
};
LS_REGISTER_OP_TABLE(EmbeddingOps, DeviceKind::kHost, kHostEmbedding);

}  // namespace
}  // namespace ls
