// Shared helpers for the op tests: a host-device fixture with upload/download, seeded random
// data, closeness checks that name the first bad element, central finite differences, and a way
// to read the message of the ls::Error a call raises. References in the tests are plain loops in
// double precision; nothing here calls a kernel.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <lockstep/error.h>
#include "engine/core/runtime.h"
#include <lockstep/tensor.h>

namespace ls::test {

inline Device host0() { return Device{DeviceKind::kHost, 0}; }

// Uniform values in [lo, hi) from a seeded mt19937 (same data on every run).
inline std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(n);
  for (float& v : out) v = dist(rng);
  return out;
}

inline std::vector<int32_t> random_labels(size_t n, int32_t classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (int32_t& v : out) v = static_cast<int32_t>(rng() % static_cast<uint32_t>(classes));
  return out;
}

// Max over i of |got - want| / max(|want|, floor).
inline double max_rel_error(const std::vector<float>& got, const std::vector<double>& want,
                            double floor = 1e-6) {
  double worst = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), floor));
  }
  return worst;
}

// Every |got[i] - want[i]| <= atol + rtol * |want[i]|; the failure names the first bad index.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& want, double rtol,
                                            double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - want[i]);
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got[i] << ", want " << want[i] << " (error " << err
             << ", max rel error " << max_rel_error(got, want) << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

// Bitwise equality of two float vectors (NaNs with the same payload compare equal).
inline ::testing::AssertionResult bitwise_equal(const std::vector<float>& a,
                                                const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << a.size() << " vs " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

// Central differences (f(x + eps e_i) - f(x - eps e_i)) / 2 eps for every i; f evaluates the op
// under test in f32 and reduces its output in double.
inline std::vector<double> fd_gradient(const std::function<double(const std::vector<float>&)>& f,
                                       std::vector<float> x, float eps) {
  std::vector<double> grad(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double up = f(x);
    x[i] = saved - eps;
    const double down = f(x);
    x[i] = saved;
    // Divide by the step actually taken: saved +- eps rounds in f32.
    grad[i] = (up - down) / (static_cast<double>(saved + eps) - static_cast<double>(saved - eps));
  }
  return grad;
}

inline double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

// The what() of the ls::Error `fn` raises, or "<no error>" (any other exception fails the test).
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

inline ::testing::AssertionResult contains(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

// A host:0 stream plus upload/download helpers.
class OpTestBase : public ::testing::Test {
 protected:
  void SetUp() override { stream_ = device_runtime(dev_).create_stream(); }
  void TearDown() override {
    if (stream_) stream_->synchronize();
  }

  Tensor upload(const std::vector<float>& values, const Shape& shape) {
    return Tensor::from_host(values, shape, dev_, *stream_);
  }
  Tensor upload_i32(const std::vector<int32_t>& values, const Shape& shape) {
    return Tensor::from_host_i32(values, shape, dev_, *stream_);
  }
  std::vector<float> download(const Tensor& t) { return t.to_host_f32(*stream_); }

  Device dev_ = host0();
  std::unique_ptr<Stream> stream_;
};

}  // namespace ls::test
