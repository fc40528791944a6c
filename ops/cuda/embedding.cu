// Embedding lookup and gradient on CUDA: the CUDA kernels of ops/embedding.h.
//
// Note [Deterministic embedding gradient without atomics]
// Float atomics would add a table row's contributions in whatever order the threads arrive.
// Instead the positions of each id are chained in increasing order, then walked. The chains come
// from sorting the keys (id << 32 | position), which are unique, so the sort has one answer:
// kernel 1 sorts tiles of 1,024 keys in shared memory (bitonic); each pass of kernel 2 merges
// pairs of sorted runs, every key finding its place by a binary search in the other run (its rank
// there plus its own index: no two keys compete for a slot), doubling the run until one is left
// (4 passes for GPT-2's 16,384 ids); kernel 3 reads the sorted keys: `head[i]` says position i is
// the first of its id, `next[i]` is the next position holding it (-1: none). O(n log n) work in
// all (the earlier links kernel compared each position with the ones around it until it met its
// id: O(n^2) for rare ids, run 6's 0.28 ms a call at 4,096 ids and about 16x that at 16,384).
// Kernel 4, one thread per (head, column): loads the table value once, adds dy[j, c] along the
// chain in increasing j and stores it once. So every table row is written by one chain, in the
// order of the sequential host loop: bitwise the same result as the host kernel, with O(n * dim)
// adds. Scratch: two key buffers of n rounded up to the tile, and 2n ints of links
// (CudaScratch). A bad id is recorded in the stream's DeviceFault (engine/core/device_fault.h),
// raised at the next synchronize() with the host kernel's message; the lookup writes NaN to its
// row, the gradient skips it (its key sorts last, with the tile's padding, and holds no chain).
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <utility>

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

// The key of a position that holds no chain (a bad id, or the padding of the last tile): it sorts
// after every real key.
constexpr uint32_t kNoChainId = 0xffffffffu;
constexpr int kSortTile = 1024;
constexpr int kSortThreads = 512;

__device__ inline uint64_t chain_key(uint32_t id, int64_t position) {
  return (static_cast<uint64_t>(id) << 32) | static_cast<uint32_t>(position);
}
__device__ inline uint32_t key_id(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
__device__ inline int32_t key_position(uint64_t key) {
  return static_cast<int32_t>(key & 0xffffffffu);
}

// Kernel 1 (see the Note): tile blockIdx.x's keys, sorted ascending in shared memory (bitonic).
__global__ void __launch_bounds__(kSortThreads)
    embedding_sort_tiles_kernel(const int32_t* __restrict__ ids, int64_t n, int64_t vocab,
                                uint64_t* __restrict__ keys, DeviceFault* fault, int32_t site) {
  __shared__ uint64_t tile[kSortTile];
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSortTile;
  for (int t = static_cast<int>(threadIdx.x); t < kSortTile; t += kSortThreads) {
    const int64_t i = base + t;
    uint32_t id = kNoChainId;
    if (i < n) {
      if (ids[i] < 0 || ids[i] >= vocab) {
        report_out_of_range(fault, site, i, ids[i], vocab);
      } else {
        id = static_cast<uint32_t>(ids[i]);
      }
    }
    tile[t] = chain_key(id, i);
  }
  __syncthreads();
  for (int size = 2; size <= kSortTile; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int t = static_cast<int>(threadIdx.x); t < kSortTile; t += kSortThreads) {
        const int partner = t ^ stride;
        if (partner <= t) continue;
        const bool ascending = (t & size) == 0;
        const uint64_t a = tile[t], b = tile[partner];
        if ((a > b) == ascending) {
          tile[t] = b;
          tile[partner] = a;
        }
      }
      __syncthreads();
    }
  }
  for (int t = static_cast<int>(threadIdx.x); t < kSortTile; t += kSortThreads) {
    keys[base + t] = tile[t];
  }
}

// Kernel 2, one pass: the sorted runs of `run` keys in `in` merged pairwise into `out`. Key g of
// run r goes to (start of the pair) + (its index in r) + (keys of the other run below it).
__global__ void embedding_merge_kernel(const uint64_t* __restrict__ in, int64_t count, int64_t run,
                                       uint64_t* __restrict__ out) {
  LS_GRID_STRIDE_LOOP(g, count) {
    const int64_t r = g / run, own = g - r * run;
    const int64_t pair_start = (r & ~int64_t{1}) * run;
    const int64_t other_start = (r ^ 1) * run;
    const int64_t other_end = other_start + run < count ? other_start + run : count;
    const uint64_t key = in[g];
    int64_t below = 0;
    if (other_start < count) {  // binary search: keys of the other run below `key`
      int64_t lo = other_start, hi = other_end;
      while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (in[mid] < key) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      below = lo - other_start;
    }
    out[pair_start + own + below] = key;
  }
}

// Kernel 3: from the sorted keys, position i's chain links: head[i] (first of its id), next[i].
__global__ void embedding_links_kernel(const uint64_t* __restrict__ sorted, int64_t count,
                                       int64_t n, int32_t* __restrict__ head,
                                       int32_t* __restrict__ next) {
  LS_GRID_STRIDE_LOOP(s, count) {
    const uint64_t key = sorted[s];
    const int32_t i = key_position(key);
    if (i >= n) continue;  // padding
    const uint32_t id = key_id(key);
    if (id == kNoChainId) {  // a bad id: no chain holds it
      head[i] = 0;
      next[i] = -1;
      continue;
    }
    head[i] = s == 0 || key_id(sorted[s - 1]) != id ? 1 : 0;
    next[i] = s + 1 < count && key_id(sorted[s + 1]) == id ? key_position(sorted[s + 1]) : -1;
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
  // See Note [Deterministic embedding gradient without atomics].
  const int64_t tiles = (n + kSortTile - 1) / kSortTile, count = tiles * kSortTile;
  const CudaScratch key_buffers(launch.device(), 2 * static_cast<size_t>(count) * sizeof(uint64_t));
  uint64_t* keys = reinterpret_cast<uint64_t*>(key_buffers.f32());
  uint64_t* spare = keys + count;
  LS_LAUNCH(embedding_sort_tiles_kernel, static_cast<unsigned int>(tiles), kSortThreads, 0, stream,
            ids, n, vocab, keys, launch.fault(), kEmbeddingBackwardSite);
  LS_CUDA_CHECK_LAUNCH();
  for (int64_t run = kSortTile; run < count; run *= 2) {
    LS_LAUNCH(embedding_merge_kernel, grid_for(count), kThreads, 0, stream, keys, count, run,
              spare);
    LS_CUDA_CHECK_LAUNCH();
    std::swap(keys, spare);
  }
  const CudaScratch links(launch.device(), 2 * static_cast<size_t>(n) * sizeof(int32_t));
  auto* head = reinterpret_cast<int32_t*>(links.f32());
  int32_t* next = head + n;
  LS_LAUNCH(embedding_links_kernel, grid_for(count), kThreads, 0, stream, keys, count, n, head,
            next);
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
