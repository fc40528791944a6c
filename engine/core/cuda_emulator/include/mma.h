// The CPU emulator's <mma.h>: the warp matrix functions (nvcuda::wmma) that lockstep's kernels
// use, on 16 x 16 x 16 tiles of bf16 (or f16) operands with f32 accumulators.
//
// On a GPU a fragment is spread over the 32 lanes of a warp in an unspecified way, and every lane
// must call each function with the same arguments. Here every lane holds the whole tile and does
// the whole operation itself (32 times the work, the same result). The emulator runs a warp's
// lanes one after another between barriers, so loads and stores are warp barriers on both sides:
// every lane has loaded before any lane stores, as on a GPU, where the warp does each at once (a
// tile loaded, multiplied into and stored back in place would otherwise be read by a lane after
// another had stored it). A kernel that is correct on a GPU, which reads other lanes' stores only
// after a __syncwarp() or __syncthreads() and treats fragment elements (x[i], num_elements) only
// uniformly, computes the same here. The product
// accumulates in f32 in k order; tensor cores add in an order of their own, so results agree to
// f32 rounding, not bitwise.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {
inline float to_float(float x) { return x; }
inline float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
inline float to_float(__half x) { return __half2float(x); }
template <typename T>
T from_float(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return __float2bfloat16(x);
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half(x);
  else
    return x;
}
template <typename Use, int M, int N, int K>
struct tile_shape;
template <int M, int N, int K>
struct tile_shape<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct tile_shape<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct tile_shape<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};
}  // namespace detail

// The whole rows x cols tile, row-major, in every lane.
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
 public:
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has the 16 x 16 x 16 shape only");
  static constexpr int rows = detail::tile_shape<Use, M, N, K>::rows;
  static constexpr int cols = detail::tile_shape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T value) {
  for (T& e : f.x) e = value;
}

// Operand tiles: the layout is the fragment's.
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  __syncwarp();
  for (int r = 0; r < F::rows; ++r) {
    for (int c = 0; c < F::cols; ++c) {
      f.x[r * F::cols + c] = std::is_same_v<Layout, col_major> ? p[c * ldm + r] : p[r * ldm + c];
    }
  }
  __syncwarp();
}

// Accumulator tiles: the layout is given.
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm,
                      layout_t layout) {
  __syncwarp();
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      f.x[r * N + c] = layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c];
    }
  }
  __syncwarp();
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                       layout_t layout) {
  __syncwarp();
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) {
      (layout == mem_col_major ? p[c * ldm + r] : p[r * ldm + c]) = f.x[r * N + c];
    }
  }
  __syncwarp();
}

// d = a b + c (d may be c).
template <int M, int N, int K, typename Ta, typename La, typename Tb, typename Lb, typename Tc>
void mma_sync(fragment<accumulator, M, N, K, Tc>& d, const fragment<matrix_a, M, N, K, Ta, La>& a,
              const fragment<matrix_b, M, N, K, Tb, Lb>& b,
              const fragment<accumulator, M, N, K, Tc>& c) {
  Tc out[M * N];
  for (int r = 0; r < M; ++r) {
    for (int col = 0; col < N; ++col) {
      float sum = detail::to_float(c.x[r * N + col]);
      for (int i = 0; i < K; ++i) {
        sum += detail::to_float(a.x[r * K + i]) * detail::to_float(b.x[i * N + col]);
      }
      out[r * N + col] = detail::from_float<Tc>(sum);
    }
  }
  for (int i = 0; i < M * N; ++i) d.x[i] = out[i];
}

}  // namespace nvcuda::wmma
