// Host kernels of ops/bias.h. bias_add splits rows over the device's cores; bias_grad splits
// columns only, so each column's sum runs over the rows in order (bitwise reproducible).
#include "ops/bias.h"

#include <algorithm>

#include <lockstep/dtype.h>

#include "ops/host/host_ops.h"

namespace ls {
namespace {

// Columns summed together in bias_grad: the accumulators stay in registers/L1 while the rows
// stream past, and each column is still summed strictly in row order.
constexpr int64_t kBiasGradBlock = 256;

// f32 or bf16 bits, as f32 (bf16 widens exactly).
inline float value_of(float x) { return x; }
inline float value_of(uint16_t bits) { return bf16_to_f32(bits); }

template <typename T>
LS_VECTOR_CLONES void bias_grad_cols(const T* __restrict dy, float* __restrict dbias, int64_t rows,
                                     int64_t cols, int64_t c0, int64_t c1, bool accumulate) {
  float acc[kBiasGradBlock];
  for (int64_t cb = c0; cb < c1; cb += kBiasGradBlock) {
    const int64_t width = std::min(kBiasGradBlock, c1 - cb);
    std::fill(acc, acc + width, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const T* __restrict row = dy + r * cols + cb;
      for (int64_t j = 0; j < width; ++j) acc[j] += value_of(row[j]);
    }
    if (accumulate) {
      for (int64_t j = 0; j < width; ++j) dbias[cb + j] += acc[j];
    } else {
      std::copy(acc, acc + width, dbias + cb);
    }
  }
}

void bias_add(float* y, const float* bias, int64_t rows, int64_t cols, Stream& stream) {
  enqueue_rows(stream, rows, cols, [=](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* __restrict row = y + r * cols;
      const float* __restrict b = bias;
      for (int64_t c = 0; c < cols; ++c) row[c] += b[c];
    }
  });
}

template <typename T>
void column_sums(const T* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
                 Stream& stream) {
  if (cols <= 0) return;
  // Parallel over columns only: each column's sum runs over the rows in order (deterministic).
  host_enqueue(stream, [=] {
    host_parallel_for(0, cols, cols_grain(rows), [=](int64_t c0, int64_t c1) {
      bias_grad_cols(dy, dbias, rows, cols, c0, c1, accumulate);
    });
  });
}

void bias_grad(const float* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
               Stream& stream) {
  column_sums(dy, dbias, rows, cols, accumulate, stream);
}

void bias_grad_bf16(const uint16_t* dy, float* dbias, int64_t rows, int64_t cols, bool accumulate,
                    Stream& stream) {
  column_sums(dy, dbias, rows, cols, accumulate, stream);
}

const BiasOps kHostBias{
    .bias_add = bias_add,
    .bias_grad = bias_grad,
    .bias_grad_bf16 = bias_grad_bf16,
};
LS_REGISTER_OP_TABLE(BiasOps, DeviceKind::kHost, kHostBias);

}  // namespace
}  // namespace ls
