// Host kernels of ops/pooling.h, split over host_parallel_for by example (pool, pool_backward)
// or by element (token_mask). kMean sums over t in order, so results do not depend on the
// chunking. A mask value counts as a real token when it is non-zero.
#include "ops/pooling.h"

#include <algorithm>

#include "engine/core/host/host_device.h"
#include "ops/host/host_ops.h"

namespace ls {
namespace {

// The position kFirst / kLast pools in one row of the mask, or -1 when no token is real.
int64_t pooled_position(const int32_t* valid, int64_t t, Pooling mode) {
  if (mode == Pooling::kFirst) {
    for (int64_t i = 0; i < t; ++i) {
      if (valid[i] != 0) return i;
    }
  } else {
    for (int64_t i = t - 1; i >= 0; --i) {
      if (valid[i] != 0) return i;
    }
  }
  return -1;
}

int64_t real_tokens(const int32_t* valid, int64_t t) {
  int64_t count = 0;
  for (int64_t i = 0; i < t; ++i) count += valid[i] != 0 ? 1 : 0;
  return count;
}

int64_t batch_grain(int64_t t, int64_t c) {
  return std::max<int64_t>(1, kHostGrain / std::max<int64_t>(1, t * c));
}

// y = x pooled for one example: x [t, c], valid [t], y [c].
void pool_row(const float* x, const int32_t* valid, int64_t t, int64_t c, Pooling mode, float* y) {
  if (mode != Pooling::kMean) {
    const int64_t pos = pooled_position(valid, t, mode);
    if (pos < 0) {
      std::fill(y, y + c, 0.0f);
    } else {
      std::copy(x + pos * c, x + (pos + 1) * c, y);
    }
    return;
  }
  std::fill(y, y + c, 0.0f);
  const int64_t count = real_tokens(valid, t);
  if (count == 0) return;
  for (int64_t i = 0; i < t; ++i) {
    if (valid[i] == 0) continue;
    for (int64_t k = 0; k < c; ++k) y[k] += x[i * c + k];
  }
  const auto n = static_cast<float>(count);
  for (int64_t k = 0; k < c; ++k) y[k] /= n;
}

// dx (+)= dy scattered for one example: dy [c], valid [t], dx [t, c].
void pool_backward_row(const float* dy, const int32_t* valid, int64_t t, int64_t c, Pooling mode,
                       float* dx, bool accumulate) {
  const int64_t pos = mode == Pooling::kMean ? -1 : pooled_position(valid, t, mode);
  const auto n = static_cast<float>(mode == Pooling::kMean ? real_tokens(valid, t) : 1);
  for (int64_t i = 0; i < t; ++i) {
    const bool gets = mode == Pooling::kMean ? valid[i] != 0 : i == pos;
    float* row = dx + i * c;
    if (!gets) {
      if (!accumulate) std::fill(row, row + c, 0.0f);
      continue;
    }
    for (int64_t k = 0; k < c; ++k) {
      const float g = mode == Pooling::kMean ? dy[k] / n : dy[k];
      row[k] = accumulate ? row[k] + g : g;
    }
  }
}

void pool(const float* x, const int32_t* valid, int64_t batch, int64_t t, int64_t c, Pooling mode,
          float* y, Stream& stream) {
  LS_ASSERT(batch >= 0 && t >= 0 && c >= 0, "pool sizes batch=", batch, " t=", t, " c=", c);
  if (batch == 0 || c == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, batch, batch_grain(t, c), [=](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        pool_row(x + b * t * c, valid + b * t, t, c, mode, y + b * c);
    });
  });
}

void pool_backward(const float* dy, const int32_t* valid, int64_t batch, int64_t t, int64_t c,
                   Pooling mode, float* dx, bool accumulate, Stream& stream) {
  LS_ASSERT(batch >= 0 && t >= 0 && c >= 0, "pool_backward sizes batch=", batch, " t=", t,
            " c=", c);
  if (batch == 0 || t == 0 || c == 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, batch, batch_grain(t, c), [=](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        pool_backward_row(dy + b * c, valid + b * t, t, c, mode, dx + b * t * c, accumulate);
      }
    });
  });
}

void token_mask(const int32_t* tokens, int64_t n, int32_t pad_id, int32_t* valid, Stream& stream) {
  enqueue_map(stream, n, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) valid[i] = tokens[i] != pad_id ? 1 : 0;
  });
}

const PoolingOps kHostPooling{
    .pool = pool,
    .pool_backward = pool_backward,
    .token_mask = token_mask,
};
LS_REGISTER_OP_TABLE(PoolingOps, DeviceKind::kHost, kHostPooling);

}  // namespace
}  // namespace ls
