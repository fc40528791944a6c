// Host softmax + cross-entropy, accuracy and label counts, parallel over rows.
// Numerically stable: each row subtracts its max before exp. Row losses (f32) go to a per-worker
// scratch buffer and are then summed in row order in double, so the loss is bitwise the same
// whatever the chunking. Labels are validated before any output is written; an out-of-range
// label raises an ls::Error (naming the row and the label) that surfaces at the stream's next
// synchronize().
// dlogits may be exactly logits (in place): each row reads what it needs before writing.
#include "ops/softmax_xent.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <type_traits>
#include <vector>

#include <lockstep/dtype.h>

#include "engine/core/device_fault.h"
#include <lockstep/error.h>
#include "engine/core/host/host_device.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// The same message as the CUDA kernels' (engine/core/device_fault.h).
void check_labels(const char* op, const int32_t* labels, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    if ((labels[r] < 0 || labels[r] >= cols) && labels[r] != kIgnoreLabel) [[unlikely]] {
      LS_THROW(describe_out_of_range(op, "label", r, labels[r], cols, kLabelHint));
    }
  }
}

// Loss of one row, -log softmax(x)[label]; writes (softmax(x) - onehot) * grad_scale to dx when
// dx is not null. An ignored row has loss 0 and a 0 gradient.
float xent_row(const float* x, int32_t label, int64_t cols, float grad_scale, float* dx) {
  if (label == kIgnoreLabel) {
    if (dx != nullptr) std::fill(dx, dx + cols, 0.0f);
    return 0.0f;
  }
  float max = x[0];
  for (int64_t c = 1; c < cols; ++c) max = x[c] > max ? x[c] : max;
  const float label_shifted = x[label] - max;  // read before dx (maybe x) is written
  float sum = 0.0f;
  if (dx == nullptr) {
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[c] - max);
  } else {
    for (int64_t c = 0; c < cols; ++c) {
      const float e = std::exp(x[c] - max);
      dx[c] = e;
      sum += e;
    }
    const float factor = grad_scale / sum;
    for (int64_t c = 0; c < cols; ++c) dx[c] *= factor;
    dx[label] -= grad_scale;
  }
  return std::log(sum) - label_shifted;
}

// Row r's loss, and its gradient into dx when dx is not null. f32 in and out: xent_row itself.
// Otherwise through a per-thread f32 row buffer: bf16 logits widened into it (exact) and computed
// there in place, and a bf16 gradient rounded out of it as f32_to_bf16 rounds. dx may be x (bf16
// in place): the row was read first.
template <typename In, typename Out>
float xent_row_as(const In* x, int32_t label, int64_t cols, float grad_scale, Out* dx) {
  if constexpr (std::is_same_v<In, float> && std::is_same_v<Out, float>) {
    return xent_row(x, label, cols, grad_scale, dx);
  } else {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(cols));
    const float* x32 = nullptr;
    if constexpr (std::is_same_v<In, float>) {
      x32 = x;
    } else {
      for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = bf16_to_f32(x[c]);
      x32 = row.data();
    }
    const float loss = xent_row(x32, label, cols, grad_scale, dx == nullptr ? nullptr : row.data());
    if (dx != nullptr) {
      for (int64_t c = 0; c < cols; ++c) dx[c] = f32_to_bf16(row[static_cast<size_t>(c)]);
    }
    return loss;
  }
}

// Every slot: logits f32 or bf16 (In), dlogits f32 or bf16 (Out), each row as xent_row_as.
template <typename In, typename Out>
void softmax_xent_as(const In* logits, const int32_t* labels, int64_t rows, int64_t cols,
                     float host_scale, const float* device_scale, float* loss, Out* dlogits,
                     Stream& stream) {
  LS_ASSERT(rows > 0 && cols > 0, "softmax_xent sizes rows=", rows, " cols=", cols);
  host_enqueue(stream, [=] {
    check_labels("softmax_xent", labels, rows, cols);
    // The device scale is read when the kernel runs (it is the step's, set on the device).
    const float grad_scale = device_scale != nullptr ? host_scale * *device_scale : host_scale;
    // Reused across calls on this worker thread, so the steady-state step does not allocate.
    thread_local std::vector<float> row_loss;
    row_loss.resize(static_cast<size_t>(rows));
    float* row_loss_data = row_loss.data();
    host_parallel_for(0, rows, rows_grain(cols), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        Out* dx = dlogits == nullptr ? nullptr : dlogits + r * cols;
        row_loss_data[r] = xent_row_as(logits + r * cols, labels[r], cols, grad_scale, dx);
      }
    });
    double total = 0.0;  // in row order: deterministic
    for (int64_t r = 0; r < rows; ++r) total += row_loss_data[r];
    *loss = static_cast<float>(total / static_cast<double>(rows));
  });
}

void count_correct(const float* logits, const int32_t* labels, int64_t rows,
                                int64_t cols, int32_t* correct, Stream& stream) {
  LS_ASSERT(rows >= 0 && cols > 0, "count_correct sizes rows=", rows, " cols=", cols);
  host_enqueue(stream, [=] {
    check_labels("count_correct", labels, rows, cols);
    // An integer count: the order chunks add up in does not change the result.
    std::atomic<int64_t> count{0};
    host_parallel_for(0, rows, rows_grain(cols),
                      [&count, logits, labels, cols](int64_t r0, int64_t r1) {
                        int64_t local = 0;
                        for (int64_t r = r0; r < r1; ++r) {
                          const float* x = logits + r * cols;
                          int64_t best = 0;
                          for (int64_t c = 1; c < cols; ++c)
                            best = x[c] > x[best] ? c : best;  // first max wins
                          local += best == labels[r] ? 1 : 0;  // never kIgnoreLabel
                        }
                        count.fetch_add(local, std::memory_order_relaxed);
                      });
    *correct = static_cast<int32_t>(count.load());
  });
}

void count_labels(const int32_t* labels, int64_t n, int32_t* count, Stream& stream) {
  LS_ASSERT(n >= 0, "count_labels size n=", n);
  host_enqueue(stream, [=] {
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) total += labels[i] != kIgnoreLabel ? 1 : 0;
    *count = static_cast<int32_t>(total);
  });
}

void softmax_xent(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                  float grad_scale, const float* device_scale, float* loss, float* dlogits,
                  Stream& stream) {
  softmax_xent_as(logits, labels, rows, cols, grad_scale, device_scale, loss, dlogits, stream);
}

void softmax_xent_bf16(const float* logits, const int32_t* labels, int64_t rows, int64_t cols,
                       float grad_scale, const float* device_scale, float* loss, uint16_t* dlogits,
                       Stream& stream) {
  softmax_xent_as(logits, labels, rows, cols, grad_scale, device_scale, loss, dlogits, stream);
}

void softmax_xent_bf16_logits(const uint16_t* logits, const int32_t* labels, int64_t rows,
                              int64_t cols, float grad_scale, const float* device_scale,
                              float* loss, uint16_t* dlogits, Stream& stream) {
  softmax_xent_as(logits, labels, rows, cols, grad_scale, device_scale, loss, dlogits, stream);
}

const SoftmaxXentOps kHostSoftmaxXent{
    .softmax_xent = softmax_xent,
    .softmax_xent_bf16 = softmax_xent_bf16,
    .softmax_xent_bf16_logits = softmax_xent_bf16_logits,
    .count_correct = count_correct,
    .count_labels = count_labels,
};
LS_REGISTER_OP_TABLE(SoftmaxXentOps, DeviceKind::kHost, kHostSoftmaxXent);

}  // namespace
}  // namespace ls
