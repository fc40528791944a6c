// Host kernels of ops/layernorm.h. The forward and the input gradient split rows over the cores;
// each row's sums run over its columns in a fixed order (8 lanes), in double. dgamma/dbeta split
// columns only, so each column is summed over the rows in order (bitwise the same whatever the
// split). The backward sums dgamma/dbeta before it writes dx, so dx may be dy; the forward reads a
// whole row before writing it, so y may be x.
#include "ops/layernorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <lockstep/dtype.h>

#include "ops/host/host_ops.h"

namespace ls {
namespace {

// Columns of dgamma/dbeta summed together: accumulators stay in L1 while the rows stream past.
constexpr int64_t kColumnBlock = 256;

// Row sums in double by 8 lanes (lane_sum in host_ops.h): deterministic, and vectorised.
template <typename F>
double row_sum(int64_t cols, F f) {
  return lane_sum<double, 8>(cols, f);
}

void layernorm_row(const float* x, const float* gamma, const float* beta, int64_t cols, float eps,
                   float* y, float* mean_out, float* rstd_out) {
  const double mean =
      row_sum(cols, [x](int64_t c) { return double{x[c]}; }) / static_cast<double>(cols);
  const double squares = row_sum(cols, [x, mean](int64_t c) {
    const double d = x[c] - mean;
    return d * d;
  });
  const auto m = static_cast<float>(mean);
  const auto rstd = static_cast<float>(1.0 / std::sqrt(squares / static_cast<double>(cols) + eps));
  for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - m) * rstd * gamma[c] + beta[c];
  *mean_out = m;
  *rstd_out = rstd;
}

// layernorm, of x or (residual not null) of sum = x + residual, which it writes first, row by row
// (add_layernorm).
void layernorm_rows(const float* x, const float* residual, float* sum, const float* gamma,
                    const float* beta, int64_t rows, int64_t cols, float eps, float* y, float* mean,
                    float* rstd, uint16_t* y16, Stream& stream) {
  if (rows <= 0 || cols <= 0) return;
  host_enqueue(stream, [=] {
    host_parallel_for(0, rows, rows_grain(cols), [=](int64_t r0, int64_t r1) {
      thread_local std::vector<float> row;  // y's row when only y16 is asked for
      if (y == nullptr) row.resize(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        float* yr = y == nullptr ? row.data() : y + r * cols;
        const float* xr = x + r * cols;
        if (residual != nullptr) {
          float* sr = sum + r * cols;
          for (int64_t c = 0; c < cols; ++c) sr[c] = xr[c] + residual[r * cols + c];
          xr = sr;
        }
        layernorm_row(xr, gamma, beta, cols, eps, yr, mean + r, rstd + r);
        if (y16 != nullptr) {
          for (int64_t c = 0; c < cols; ++c) y16[r * cols + c] = f32_to_bf16(yr[c]);
        }
      }
    });
  });
}

void layernorm(const float* x, const float* gamma, const float* beta, int64_t rows, int64_t cols,
               float eps, float* y, float* mean, float* rstd, uint16_t* y16, Stream& stream) {
  layernorm_rows(x, nullptr, nullptr, gamma, beta, rows, cols, eps, y, mean, rstd, y16, stream);
}

void add_layernorm(const float* a, const float* b, float* sum, const float* gamma,
                   const float* beta, int64_t rows, int64_t cols, float eps, float* y, float* mean,
                   float* rstd, uint16_t* y16, Stream& stream) {
  layernorm_rows(a, b, sum, gamma, beta, rows, cols, eps, y, mean, rstd, y16, stream);
}

// dgamma[c] += sum_r dy * xhat, dbeta[c] += sum_r dy for c in [c0, c1), rows in order.
LS_VECTOR_CLONES void param_grad_cols(const float* x, const float* mean, const float* rstd,
                                      const float* dy, int64_t rows, int64_t cols, int64_t c0,
                                      int64_t c1, float* dgamma, float* dbeta) {
  float acc_gamma[kColumnBlock], acc_beta[kColumnBlock];
  for (int64_t cb = c0; cb < c1; cb += kColumnBlock) {
    const int64_t width = std::min(kColumnBlock, c1 - cb);
    std::fill(acc_gamma, acc_gamma + width, 0.0f);
    std::fill(acc_beta, acc_beta + width, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const float* __restrict xr = x + r * cols + cb;
      const float* __restrict g = dy + r * cols + cb;
      const float m = mean[r], s = rstd[r];
      for (int64_t j = 0; j < width; ++j) {
        acc_gamma[j] += g[j] * ((xr[j] - m) * s);
        acc_beta[j] += g[j];
      }
    }
    for (int64_t j = 0; j < width; ++j) {
      dgamma[cb + j] += acc_gamma[j];
      dbeta[cb + j] += acc_beta[j];
    }
  }
}

void input_grad_row(const float* x, const float* gamma, float mean, float rstd, const float* dy,
                    int64_t cols, float* dx, bool accumulate) {
  const double sum_g = row_sum(cols, [=](int64_t c) { return double{dy[c] * gamma[c]}; });
  const double sum_gx = row_sum(cols, [=](int64_t c) {
    return static_cast<double>(dy[c] * gamma[c]) * ((x[c] - mean) * rstd);
  });
  const auto mean_g = static_cast<float>(sum_g / static_cast<double>(cols));
  const auto mean_gx = static_cast<float>(sum_gx / static_cast<double>(cols));
  for (int64_t c = 0; c < cols; ++c) {
    const float xhat = (x[c] - mean) * rstd;
    const float v = rstd * (dy[c] * gamma[c] - mean_g - xhat * mean_gx);
    dx[c] = accumulate ? dx[c] + v : v;
  }
}

void layernorm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                        const float* dy, int64_t rows, int64_t cols, float* dx, bool accumulate,
                        float* dgamma, float* dbeta, Stream& stream) {
  if (rows <= 0 || cols <= 0) return;
  host_enqueue(stream, [=] {
    // dgamma/dbeta first: they read dy, which dx may overwrite.
    host_parallel_for(0, cols, cols_grain(rows), [=](int64_t c0, int64_t c1) {
      param_grad_cols(x, mean, rstd, dy, rows, cols, c0, c1, dgamma, dbeta);
    });
    host_parallel_for(0, rows, rows_grain(cols), [=](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        input_grad_row(x + r * cols, gamma, mean[r], rstd[r], dy + r * cols, cols, dx + r * cols,
                       accumulate);
      }
    });
  });
}

const LayerNormOps kHostLayerNorm{
    .layernorm = layernorm,
    .add_layernorm = add_layernorm,
    .layernorm_backward = layernorm_backward,
};
LS_REGISTER_OP_TABLE(LayerNormOps, DeviceKind::kHost, kHostLayerNorm);

}  // namespace
}  // namespace ls
