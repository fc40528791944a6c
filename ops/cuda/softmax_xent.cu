// Softmax cross-entropy (mean loss + dlogits), count_correct and count_labels on CUDA: the CUDA
// kernels of ops/softmax_xent.h. Rows labelled kIgnoreLabel add 0 and get a 0 gradient row.
//
// Note [Deterministic softmax_xent in two passes]
// Pass 1: block r computes row r alone (kThreads threads striding over the columns, each with a
// running maximum and sum, so one read of the row gives both; block max and sum in a fixed shape,
// block_reduce.cuh): its loss -log softmax(x)[label] into a per-row scratch array (the device's
// caching allocator, CudaScratch), and its dlogits when asked, f32 or rounded to bf16 (a second
// read of the row, from L2 while it is there).
// Pass 2: one block adds the row losses: thread t sums rows t, t + T, t + 2T, ... in order, in
// double, then the T partial sums are added in a fixed tree, and the mean is rounded to f32. So
// [16384, 50257] logits are read by 16,384 blocks, not summed by one, and every sum has a fixed
// order: bitwise the same result on every run. (The host adds the row losses in row order, in
// double: equal to rounding.) In place (dlogits == logits) is safe: a row block reads x[label]
// and finishes its reductions, which end with a barrier, before any of its threads writes.
// A label outside [0, cols) cannot raise an error on the device: its row block records it in
// the stream's DeviceFault (engine/core/device_fault.h), which the stream raises at its next
// synchronize() with the host kernel's message; that row's loss and dlogits are NaN meanwhile.
// count_correct and count_labels are integer-only, so a per-block count added with atomicAdd is
// exact and deterministic; the count is zeroed first in stream order.
// device_scale (the step's loss gradient scale, ops/step_control.h) is read by each row block
// when it runs, not by the host, so a graph launch uses the value of that step.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "ops/cuda/bf16_bits.cuh"
#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/softmax_xent.h"

namespace ls::cuda_ops {
namespace {

const int32_t kSoftmaxXentSite = register_fault_site("softmax_xent", "label", kLabelHint);
const int32_t kCountCorrectSite = register_fault_site("count_correct", "label", kLabelHint);

// dlogits element c of a row: f32, or rounded to bf16 (softmax_xent_bf16).
__device__ inline void store_gradient(float* dx, int64_t c, float value) { dx[c] = value; }
__device__ inline void store_gradient(uint16_t* dx, int64_t c, float value) {
  dx[c] = f32_to_bf16_bits(value);
}

// Pass 1 (see Note [Deterministic softmax_xent in two passes]): block r, kThreads threads, row r.
// dlogits may be null (the loss only) or, for f32, logits itself. Each thread keeps a running
// maximum and a sum of exp(x - that maximum) over its columns (rescaled when the maximum grows),
// so the row is read once for both; the block then rescales the threads' sums to the row's
// maximum. The loss and dlogits read the row a second time, while it is still in L2.
// The logits are f32 (logits) or bf16 (logits16, widened exactly; then logits is null).
template <typename Out>
__global__ void softmax_xent_kernel(const float* logits, const uint16_t* logits16,
                                    const int32_t* labels, int64_t cols, float grad_scale,
                                    const float* device_scale, float* row_loss, Out* dlogits,
                                    DeviceFault* fault, int32_t site) {
  __shared__ float shared[kWarp];
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r = blockIdx.x;
  const float* x32 = logits == nullptr ? nullptr : logits + r * cols;
  const uint16_t* x16 = logits16 == nullptr ? nullptr : logits16 + r * cols;
  const auto x = [x32, x16](int64_t c) {
    return x16 != nullptr ? bf16_bits_to_f32(x16[c]) : x32[c];
  };
  Out* dx = dlogits == nullptr ? nullptr : dlogits + r * cols;
  const int32_t label = labels[r];
  if (label == kIgnoreLabel) {  // uniform over the block, as are the returns below
    if (tid == 0) row_loss[r] = 0.0f;
    if (dx != nullptr)
      for (int64_t c = tid; c < cols; c += kThreads) store_gradient(dx, c, 0.0f);
    return;
  }
  if (label < 0 || label >= cols) {
    if (tid == 0) {
      report_out_of_range(fault, site, r, label, cols);
      row_loss[r] = __int_as_float(0x7fc00000);  // NaN, see the Note
    }
    if (dx != nullptr)
      for (int64_t c = tid; c < cols; c += kThreads)
        store_gradient(dx, c, __int_as_float(0x7fc00000));
    return;
  }
  const float label_logit = tid == 0 ? x(label) : 0.0f;  // before anyone writes dx (in place)
  float thread_max = -INFINITY, thread_sum = 0.0f;
  for (int64_t c = tid; c < cols; c += kThreads) {
    const float v = x(c);
    if (v > thread_max) {
      thread_sum = thread_sum * expf(thread_max - v) + 1.0f;  // exp(-inf) = 0 the first time
      thread_max = v;
    } else if (v != -INFINITY) {  // a -inf logit adds 0 (and -inf - -inf would be NaN)
      thread_sum += expf(v - thread_max);
    }
  }
  const float max_value = block_max(thread_max, shared);
  // A thread with no columns (cols < kThreads) has max -inf and sum 0: it adds 0.
  const float rescaled = thread_sum == 0.0f ? 0.0f : thread_sum * expf(thread_max - max_value);
  const float sum = block_sum(rescaled, shared);  // ends with a barrier: every read is done
  if (tid == 0) row_loss[r] = logf(sum) - (label_logit - max_value);  // difference first: exact
  if (dx == nullptr) return;
  // The order of ops/softmax_xent.h: (softmax - onehot) * grad_scale, then * *device_scale.
  const float scale = device_scale == nullptr ? 1.0f : *device_scale;
  for (int64_t c = tid; c < cols; c += kThreads) {
    const float p = expf(x(c) - max_value) / sum;
    const float g = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
    store_gradient(dx, c, device_scale == nullptr ? g : g * scale);
  }
}

// Pass 2: *loss = the mean of the row losses, summed in a fixed order in double.
__global__ void softmax_xent_loss_kernel(const float* row_loss, int64_t rows, float* loss) {
  __shared__ double partials[kThreads];
  double partial = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kThreads) partial += row_loss[r];
  const double total = block_sum_tree(partial, partials);
  if (threadIdx.x == 0) *loss = static_cast<float>(total / static_cast<double>(rows));
}

// One thread per row: argmax with the first maximum winning ties, as the host kernel does.
__global__ void count_correct_kernel(const float* logits, const int32_t* labels, int64_t rows,
                                     int64_t cols, int32_t* correct, DeviceFault* fault,
                                     int32_t site) {
  __shared__ int counts[kThreads];
  int count = 0;
  LS_GRID_STRIDE_LOOP(r, rows) {
    if (cols == 0) break;  // no class can match
    if (labels[r] == kIgnoreLabel) continue;
    if (labels[r] < 0 || labels[r] >= cols) {
      report_out_of_range(fault, site, r, labels[r], cols);
    }
    const float* x = logits + r * cols;
    float best_value = x[0];
    int64_t best = 0;
    for (int64_t c = 1; c < cols; ++c) {
      if (x[c] > best_value) {
        best_value = x[c];
        best = c;
      }
    }
    if (labels[r] == best) ++count;
  }
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) counts[threadIdx.x] += counts[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0 && counts[0] != 0) atomicAdd(correct, counts[0]);
}

// *count += the labels of this block's grid-stride share that are not kIgnoreLabel.
__global__ void count_labels_kernel(const int32_t* labels, int64_t n, int32_t* count) {
  __shared__ int counts[kThreads];
  int local = 0;
  LS_GRID_STRIDE_LOOP(i, n) { local += labels[i] != kIgnoreLabel ? 1 : 0; }
  counts[threadIdx.x] = local;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) counts[threadIdx.x] += counts[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0 && counts[0] != 0) atomicAdd(count, counts[0]);
}

}  // namespace

// See Note [Deterministic softmax_xent in two passes]; dlogits may be logits itself.
// logits16: the logits in bf16 instead (then logits is null).
template <typename Out>
void softmax_xent_as(const float* logits, const uint16_t* logits16, const int32_t* labels,
                     int64_t rows, int64_t cols, float grad_scale, const float* device_scale,
                     float* loss, Out* dlogits, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(loss != nullptr, "softmax_xent: the loss pointer is null");
  LS_CHECK(rows < INT_MAX, "softmax_xent: ", rows, " rows is more than one launch handles (",
           INT_MAX - 1, "); split the batch");
  const CudaScratch row_loss(launch.device(), sizeof(float) * std::max<int64_t>(rows, 1));
  if (rows > 0) {
    LS_LAUNCH(softmax_xent_kernel<Out>, static_cast<unsigned int>(rows), kThreads, 0, stream,
              logits, logits16, labels, cols, grad_scale, device_scale, row_loss.f32(), dlogits,
              launch.fault(), kSoftmaxXentSite);
    LS_CUDA_CHECK_LAUNCH();
  }
  LS_LAUNCH(softmax_xent_loss_kernel, 1, kThreads, 0, stream, row_loss.f32(), rows, loss);
  LS_CUDA_CHECK_LAUNCH();
}

void softmax_xent(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                  float grad_scale, const float* device_scale, float* loss, float* dlogits,
                  Stream& on) {
  softmax_xent_as(logits, nullptr, labels, rows, cols, grad_scale, device_scale, loss, dlogits, on);
}

void softmax_xent_bf16(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                       float grad_scale, const float* device_scale, float* loss, uint16_t* dlogits,
                       Stream& on) {
  softmax_xent_as(logits, nullptr, labels, rows, cols, grad_scale, device_scale, loss, dlogits, on);
}

// bf16 logits; dlogits may be logits itself (see the Note: in place is safe).
void softmax_xent_bf16_logits(const uint16_t* logits, const int32_t* labels, int64_t rows,
                              int64_t cols, float grad_scale, const float* device_scale,
                              float* loss, uint16_t* dlogits, Stream& on) {
  softmax_xent_as(nullptr, logits, labels, rows, cols, grad_scale, device_scale, loss, dlogits, on);
}

void count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                   int32_t* correct, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(int32_t), stream));
  if (rows == 0) return;
  LS_LAUNCH(count_correct_kernel, grid_for(rows), kThreads, 0, stream, logits, labels, rows, cols,
            correct, launch.fault(), kCountCorrectSite);
  LS_CUDA_CHECK_LAUNCH();
}

void count_labels(const int32_t* labels, int64_t n, int32_t* count, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CUDA_CHECK(cudaMemsetAsync(count, 0, sizeof(int32_t), stream));
  if (n == 0) return;
  LS_LAUNCH(count_labels_kernel, grid_for(n), kThreads, 0, stream, labels, n, count);
  LS_CUDA_CHECK_LAUNCH();
}

const SoftmaxXentOps kCudaSoftmaxXent{
    .softmax_xent = softmax_xent,
    .softmax_xent_bf16 = softmax_xent_bf16,
    .softmax_xent_bf16_logits = softmax_xent_bf16_logits,
    .count_correct = count_correct,
    .count_labels = count_labels,
};
LS_REGISTER_OP_TABLE(SoftmaxXentOps, DeviceKind::kCuda, kCudaSoftmaxXent);

}  // namespace ls::cuda_ops
