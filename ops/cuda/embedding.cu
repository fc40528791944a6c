// Embedding lookup and gradient on CUDA: the CUDA kernels of ops/embedding.h.
//
// Note [Deterministic embedding gradient without atomics]
// Float atomics would add a table row's contributions in whatever order the threads arrive. Here
// block i owns position i only when i is the FIRST occurrence of its id (the block checks
// ids[0, i) for the same id); it then adds dy[j, :] for every j >= i with ids[j] == id, in
// increasing j, into the table row it loaded, one column per thread, and stores the row once. So
// every table row is written by one block, in the order of the sequential host loop: bitwise the
// same result as the host kernel. The cost is O(n^2) id comparisons (ids stay in L1/L2), fine
// for the n of a batch of tokens; nothing is allocated.
// A bad id is recorded in the stream's DeviceFault (engine/core/device_fault.h), raised at the
// next synchronize() with the host kernel's message; the lookup writes NaN to its row, the
// gradient skips it.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "ops/cuda/cuda_launch.h"
#include "ops/embedding.h"

namespace ls::cuda_ops {
namespace {

const int32_t kEmbeddingSite = register_fault_site("embedding", "id", kEmbeddingIdHint);
const int32_t kEmbeddingBackwardSite =
    register_fault_site("embedding_backward", "id", kEmbeddingIdHint);

__global__ void embedding_kernel(const float* __restrict__ table, const int32_t* __restrict__ ids,
                                 int64_t n, int64_t vocab, int64_t dim, float* __restrict__ out,
                                 DeviceFault* fault, int32_t site) {
  LS_GRID_STRIDE_LOOP(e, n * dim) {
    const int64_t i = e / dim;
    const int64_t c = e - i * dim;
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      if (c == 0) report_out_of_range(fault, site, i, id, vocab);
      out[e] = __int_as_float(0x7fc00000);  // NaN
    } else {
      out[e] = table[static_cast<int64_t>(id) * dim + c];
    }
  }
}

// See Note [Deterministic embedding gradient without atomics]. One block per position i
// (grid-stride); every branch below is uniform over the block.
__global__ void embedding_backward_kernel(const float* __restrict__ dy,
                                          const int32_t* __restrict__ ids, int64_t n, int64_t vocab,
                                          int64_t dim, float* __restrict__ dtable,
                                          DeviceFault* fault, int32_t site) {
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) {
      if (threadIdx.x == 0)
        report_out_of_range(fault, site, i, id, vocab);
      continue;
    }
    int seen = 0;
    for (int64_t j = threadIdx.x; j < i && !seen; j += blockDim.x) seen = ids[j] == id;
    if (__syncthreads_or(seen)) continue;  // an earlier block owns this table row
    float* row = dtable + static_cast<int64_t>(id) * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
      float value = row[c];
      for (int64_t j = i; j < n; ++j) {
        if (ids[j] == id) value += dy[j * dim + c];
      }
      row[c] = value;
    }
  }
}

}  // namespace

void embedding(const float* table, const int32_t* ids, int64_t n, int64_t vocab, int64_t dim,
               float* out, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n * dim == 0) return;
  LS_LAUNCH(embedding_kernel, grid_for(n * dim), kThreads, 0, stream, table, ids, n, vocab, dim,
            out, launch.fault(), kEmbeddingSite);
  LS_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const float* dy, const int32_t* ids, int64_t n, int64_t vocab, int64_t dim,
                        float* dtable, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n * dim == 0) return;
  const auto blocks = static_cast<unsigned int>(std::min<int64_t>(n, kMaxBlocks));
  LS_LAUNCH(embedding_backward_kernel, blocks, kThreads, 0, stream, dy, ids, n, vocab, dim, dtable,
            launch.fault(), kEmbeddingBackwardSite);
  LS_CUDA_CHECK_LAUNCH();
}

const EmbeddingOps kCudaEmbedding{
    .embedding = embedding,
    .embedding_backward = embedding_backward,
};
LS_REGISTER_OP_TABLE(EmbeddingOps, DeviceKind::kCuda, kCudaEmbedding);

}  // namespace ls::cuda_ops
