// Embedding lookup and gradient on CUDA: the CUDA kernels of ops/embedding.h.
//
// Note [Deterministic embedding gradient without atomics]
// Float atomics would add a table row's contributions in whatever order the threads arrive.
// Instead the positions of each id are chained in increasing order, then walked. Kernel 1, one
// thread per position i: `head[i]` says i is the FIRST occurrence of its id (no earlier position
// holds it) and `next[i]` is the next position holding it (-1: none); O(n^2) id comparisons in the
// worst case, but per position, not per column (ids stay in L1/L2). Kernel 2, one thread per
// (head, column): loads the table value once, adds dy[j, c] along the chain in increasing j and
// stores it once. So every table row is written by one chain, in the order of the sequential
// host loop: bitwise the same result as the host kernel, with O(n * dim) adds. (The first
// version had every column thread scan the rest of the ids itself: O(n^2 * dim), 32.8 ms for
// 4,096 ids at GPT-2's width on an H200.) The links take 2n ints of scratch (CudaScratch).
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

// See Note [Deterministic embedding gradient without atomics]: the chains of equal ids.
__global__ void embedding_links_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t vocab,
                                       int32_t* __restrict__ head, int32_t* __restrict__ next,
                                       DeviceFault* fault, int32_t site) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab) {  // skipped: no chain holds it
      report_out_of_range(fault, site, i, id, vocab);
      head[i] = 0;
      next[i] = -1;
      continue;
    }
    int32_t first = 1;
    for (int64_t j = i - 1; j >= 0; --j) {
      if (ids[j] == id) {
        first = 0;
        break;
      }
    }
    int32_t after = -1;
    for (int64_t j = i + 1; j < n; ++j) {
      if (ids[j] == id) {
        after = static_cast<int32_t>(j);
        break;
      }
    }
    head[i] = first;
    next[i] = after;
  }
}

// One thread per (position, column); the threads of chain heads add the chain into the row.
__global__ void embedding_chains_kernel(const float* __restrict__ dy,
                                        const int32_t* __restrict__ ids, int64_t n, int64_t dim,
                                        const int32_t* __restrict__ head,
                                        const int32_t* __restrict__ next,
                                        float* __restrict__ dtable) {
  LS_GRID_STRIDE_LOOP(e, n * dim) {
    const int64_t i = e / dim;
    if (head[i] == 0) continue;
    const int64_t c = e - i * dim;
    float* cell = dtable + static_cast<int64_t>(ids[i]) * dim + c;
    float value = *cell;
    for (int64_t j = i; j >= 0; j = next[j]) value += dy[j * dim + c];
    *cell = value;
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
  LS_ASSERT(n < INT32_MAX, "embedding_backward: ", n, " ids; the chains hold int32 positions");
  const CudaScratch links(launch.device(), 2 * static_cast<size_t>(n) * sizeof(int32_t));
  auto* head = reinterpret_cast<int32_t*>(links.f32());
  int32_t* next = head + n;
  LS_LAUNCH(embedding_links_kernel, grid_for(n), kThreads, 0, stream, ids, n, vocab, head, next,
            launch.fault(), kEmbeddingBackwardSite);
  LS_CUDA_CHECK_LAUNCH();
  LS_LAUNCH(embedding_chains_kernel, grid_for(n * dim), kThreads, 0, stream, dy, ids, n, dim, head,
            next, dtable);
  LS_CUDA_CHECK_LAUNCH();
}

const EmbeddingOps kCudaEmbedding{
    .embedding = embedding,
    .embedding_backward = embedding_backward,
};
LS_REGISTER_OP_TABLE(EmbeddingOps, DeviceKind::kCuda, kCudaEmbedding);

}  // namespace ls::cuda_ops
