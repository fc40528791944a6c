// Host squared-error and BCE-with-logits losses (ops/pointwise_loss.h). The sum runs over blocks
// of kPointwiseLossBlock elements in parallel, each block in double in element order, then the
// block sums in block order: bitwise the same whatever the number of cores.
#include "ops/pointwise_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/host/host_ops.h"

namespace ls {
namespace {

double loss_of(PointwiseLoss kind, float p, float t) {
  if (kind == PointwiseLoss::kSquaredError) {
    const double d = static_cast<double>(p) - t;
    return d * d;
  }
  const double x = p;
  return std::max(x, 0.0) - x * t + std::log1p(std::exp(-std::abs(x)));
}

float derivative_of(PointwiseLoss kind, float p, float t) {
  if (kind == PointwiseLoss::kSquaredError) return 2.0f * (p - t);
  // sigmoid(p) without overflow for large |p|.
  const float sigmoid =
      p >= 0.0f ? 1.0f / (1.0f + std::exp(-p)) : std::exp(p) / (1.0f + std::exp(p));
  return sigmoid - t;
}

void loss_sum(PointwiseLoss kind, const float* pred, const float* target, int64_t n, float* sum,
              Stream& stream) {
  LS_ASSERT(n >= 0, "pointwise loss size n=", n);
  host_enqueue(stream, [=] {
    const int64_t blocks = (n + kPointwiseLossBlock - 1) / kPointwiseLossBlock;
    thread_local std::vector<double> block_sums;  // reused: no allocation in the steady state
    block_sums.assign(static_cast<size_t>(blocks), 0.0);
    double* sums = block_sums.data();
    host_parallel_for(0, blocks, 1, [=](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t end = std::min(n, (b + 1) * kPointwiseLossBlock);
        double s = 0.0;
        for (int64_t i = b * kPointwiseLossBlock; i < end; ++i) {
          s += loss_of(kind, pred[i], target[i]);
        }
        sums[b] = s;
      }
    });
    double total = 0.0;
    for (int64_t b = 0; b < blocks; ++b) total += sums[b];
    *sum = static_cast<float>(total);
  });
}

void loss_backward(PointwiseLoss kind, const float* pred, const float* target, int64_t n,
                   const float* seed, float* dpred, bool accumulate, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    const float scale = *seed;  // read when the kernel runs: the step's, set on the device
    for (int64_t i = b; i < e; ++i) {
      const float g = derivative_of(kind, pred[i], target[i]) * scale;
      dpred[i] = accumulate ? dpred[i] + g : g;
    }
  });
}

const PointwiseLossOps kHostPointwiseLoss{
    .loss_sum = loss_sum,
    .loss_backward = loss_backward,
};
LS_REGISTER_OP_TABLE(PointwiseLossOps, DeviceKind::kHost, kHostPointwiseLoss);

}  // namespace
}  // namespace ls
