// Softmax cross-entropy (mean loss + dlogits), count_correct and count_labels on CUDA: the CUDA
// kernels of ops/softmax_xent.h. Rows labelled kIgnoreLabel add 0 and get a 0 gradient row.
//
// Note [Deterministic softmax_xent without scratch memory]
// One launch, no scratch: block 0 computes the mean loss alone (thread t sums the losses of rows
// t, t+T, t+2T, ... in order, in double, then the T partial sums are added in a fixed tree),
// while blocks 1..rows each compute one row's softmax and write its dlogits. Every sum has a
// fixed order, so the result is bitwise the same on every run, and nothing is allocated in the
// step. The loss block reads each row once more; for the class counts of classification heads
// that is cheap. In place (dlogits == logits) the loss block runs first as a launch of its own.
// A label outside [0, cols) cannot raise an error on the device: the loss block records it in
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

#include "ops/cuda/block_reduce.cuh"
#include "ops/cuda/cuda_launch.h"
#include "ops/softmax_xent.h"

namespace ls::cuda_ops {
namespace {

// -log softmax(x)[label] for one row, computed by one thread, columns in order.
__device__ float row_loss(const float* x, int64_t cols, int32_t label) {
  if (label == kIgnoreLabel) return 0.0f;
  if (label < 0 || label >= cols) return __int_as_float(0x7fc00000);  // NaN, see the Note
  float max_value = x[0];
  for (int64_t c = 1; c < cols; ++c) max_value = fmaxf(max_value, x[c]);
  float sum = 0.0f;
  for (int64_t c = 0; c < cols; ++c) sum += expf(x[c] - max_value);
  return logf(sum) - (x[label] - max_value);  // the difference first: exact for close values
}

// See Note [Deterministic softmax_xent without scratch memory]. Launched with kThreads threads.
// With `loss` set, block 0 computes the loss and rows start at block 1; without, every block is
// a row (the in-place launch, see softmax_xent below).
__global__ void softmax_xent_kernel(const float* logits, const int32_t* labels, int64_t rows,
                                    int64_t cols, float grad_scale, const float* device_scale,
                                    float* loss, float* dlogits, DeviceFault* fault,
                                    const char* hint) {
  __shared__ double partials[kThreads];
  __shared__ float shared[kWarp];
  const int tid = static_cast<int>(threadIdx.x);
  if (loss != nullptr && blockIdx.x == 0) {
    double partial = 0.0;
    for (int64_t r = tid; r < rows; r += kThreads) {
      if ((labels[r] < 0 || labels[r] >= cols) && labels[r] != kIgnoreLabel) {
        report_out_of_range(fault, "softmax_xent", "label", hint, r, labels[r], cols);
      }
      partial += row_loss(logits + r * cols, cols, labels[r]);
    }
    partials[tid] = partial;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
      if (tid < stride) partials[tid] += partials[tid + stride];
      __syncthreads();
    }
    if (tid == 0) *loss = static_cast<float>(partials[0] / static_cast<double>(rows));
    return;
  }
  const int64_t r = static_cast<int64_t>(blockIdx.x) - (loss != nullptr ? 1 : 0);
  const float* x = logits + r * cols;
  float* dx = dlogits + r * cols;  // may be x itself: each thread reads x[c] before writing dx[c]
  const int32_t label = labels[r];
  if (label == kIgnoreLabel) {
    for (int64_t c = tid; c < cols; c += kThreads) dx[c] = 0.0f;
    return;
  }
  if (label < 0 || label >= cols) {
    for (int64_t c = tid; c < cols; c += kThreads) dx[c] = __int_as_float(0x7fc00000);
    return;
  }
  float max_value = -INFINITY;
  for (int64_t c = tid; c < cols; c += kThreads) max_value = fmaxf(max_value, x[c]);
  max_value = block_max(max_value, shared);
  float sum = 0.0f;
  for (int64_t c = tid; c < cols; c += kThreads) sum += expf(x[c] - max_value);
  sum = block_sum(sum, shared);  // ends with a barrier: every read of other columns is done
  if (device_scale == nullptr) {
    for (int64_t c = tid; c < cols; c += kThreads) {
      const float p = expf(x[c] - max_value) / sum;
      dx[c] = (p - (c == label ? 1.0f : 0.0f)) * grad_scale;
    }
    return;
  }
  // The order of ops/softmax_xent.h: (softmax - onehot) * grad_scale, then * *device_scale.
  const float scale = *device_scale;
  for (int64_t c = tid; c < cols; c += kThreads) {
    const float p = expf(x[c] - max_value) / sum;
    dx[c] = ((p - (c == label ? 1.0f : 0.0f)) * grad_scale) * scale;
  }
}

// One thread per row: argmax with the first maximum winning ties, as the host kernel does.
__global__ void count_correct_kernel(const float* logits, const int32_t* labels, int64_t rows,
                                     int64_t cols, int32_t* correct, DeviceFault* fault,
                                     const char* hint) {
  __shared__ int counts[kThreads];
  int count = 0;
  LS_GRID_STRIDE_LOOP(r, rows) {
    if (cols == 0) break;  // no class can match
    if (labels[r] == kIgnoreLabel) continue;
    if (labels[r] < 0 || labels[r] >= cols) {
      report_out_of_range(fault, "count_correct", "label", hint, r, labels[r], cols);
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

// dlogits may be logits itself (ops/softmax_xent.h). Then the loss must read the rows before
// they are overwritten: the loss block runs as its own launch first, in stream order.
void softmax_xent(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                  float grad_scale, const float* device_scale, float* loss, float* dlogits,
                  Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CHECK(loss != nullptr, "softmax_xent: the loss pointer is null");
  LS_CHECK(rows < INT_MAX, "softmax_xent: ", rows, " rows is more than one launch handles (",
           INT_MAX - 1, "); split the batch");
  const int64_t row_blocks = dlogits != nullptr && cols > 0 ? rows : 0;
  const auto begin = [](const float* p) { return reinterpret_cast<uintptr_t>(p); };
  const uintptr_t bytes = static_cast<uintptr_t>(rows * cols) * sizeof(float);
  const bool overlap = row_blocks > 0 && begin(dlogits) < begin(logits) + bytes &&
                       begin(logits) < begin(dlogits) + bytes;
  if (overlap) {
    LS_LAUNCH(softmax_xent_kernel, 1, kThreads, 0, stream, logits, labels, rows, cols, grad_scale,
              device_scale, loss, nullptr, launch.fault(), kLabelHint);
    LS_CUDA_CHECK_LAUNCH();
    LS_LAUNCH(softmax_xent_kernel, static_cast<unsigned int>(row_blocks), kThreads, 0, stream,
              logits, labels, rows, cols, grad_scale, device_scale, nullptr, dlogits,
              launch.fault(), kLabelHint);
  } else {
    LS_LAUNCH(softmax_xent_kernel, static_cast<unsigned int>(1 + row_blocks), kThreads, 0, stream,
              logits, labels, rows, cols, grad_scale, device_scale, loss, dlogits, launch.fault(),
              kLabelHint);
  }
  LS_CUDA_CHECK_LAUNCH();
}

void count_correct(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                   int32_t* correct, Stream& on) {
  const CudaLaunch launch(on);
  const cudaStream_t stream = launch.stream();
  LS_CUDA_CHECK(cudaMemsetAsync(correct, 0, sizeof(int32_t), stream));
  if (rows == 0) return;
  LS_LAUNCH(count_correct_kernel, grid_for(rows), kThreads, 0, stream, logits, labels, rows, cols,
            correct, launch.fault(), kLabelHint);
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
    .count_correct = count_correct,
    .count_labels = count_labels,
};
LS_REGISTER_OP_TABLE(SoftmaxXentOps, DeviceKind::kCuda, kCudaSoftmaxXent);

}  // namespace ls::cuda_ops
