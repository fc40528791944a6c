// Dropout on CUDA: the CUDA kernel of ops/dropout.h. One thread per element (grid-stride); the
// mask comes from the header's integer hash, so it is bit for bit the host kernel's. The product
// and sum use explicit round-to-nearest intrinsics (no fused multiply-add), so y is bitwise the
// host kernel's too. y may be x: each element is read and written by the same thread.
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/cuda_launch.h"
#include "ops/dropout.h"

namespace ls::cuda_ops {
namespace {

__global__ void dropout_kernel(const float* x, float* y, int64_t n, int64_t row_len,
                               int64_t first_row, uint32_t threshold, float scale, uint64_t key,
                               bool accumulate) {
  LS_GRID_STRIDE_LOOP(i, n) {
    const int64_t row = i / row_len;
    const int64_t pos = i - row * row_len;
    const uint64_t row_hash = dropout_row_hash(key, static_cast<uint64_t>(first_row + row));
    const bool keep = dropout_bits(row_hash, static_cast<uint64_t>(pos)) >= threshold;
    const float v = keep ? __fmul_rn(x[i], scale) : 0.0f;
    y[i] = accumulate ? __fadd_rn(y[i], v) : v;
  }
}

}  // namespace

void dropout(const float* x, float* y, int64_t n, int64_t row_len, int64_t first_row,
             uint32_t threshold, float scale, uint64_t key, bool accumulate, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  if (n == 0) return;
  LS_LAUNCH(dropout_kernel, grid_for(n), kThreads, 0, stream, x, y, n, row_len, first_row,
            threshold, scale, key, accumulate);
  LS_CUDA_CHECK_LAUNCH();
}

const DropoutOps kCudaDropout{
    .dropout = dropout,
};
LS_REGISTER_OP_TABLE(DropoutOps, DeviceKind::kCuda, kCudaDropout);

}  // namespace ls::cuda_ops
