// Test helpers for the host kernels: reproducible random inputs, a comparison of a kernel's float
// output with a double-precision reference that reports the worst element, batch norm's shapes.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/op_params.h"

namespace dpe::host::testing {

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// [n, c, h, w] values re-laid out as [n, h, w, c] (channels last).
template <typename T>
std::vector<T> to_nhwc(const std::vector<T>& v, int64_t n, int64_t c, int64_t h, int64_t w) {
  std::vector<T> out(v.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          out[((i * h + y) * w + x) * c + ch] = v[((i * c + ch) * h + y) * w + x];
  return out;
}

// Every |got - want| <= atol + rtol * |want|; the message names the first bad index.
inline void expect_close(const std::vector<double>& want, const float* got, double rtol,
                         double atol, const std::string& what) {
  double worst = 0.0;
  int64_t worst_i = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = err - (atol + rtol * std::fabs(want[i]));
    if (!(excess <= 0.0) && (worst_i < 0 || excess > worst)) {
      worst = excess;
      worst_i = static_cast<int64_t>(i);
    }
  }
  EXPECT_LT(worst_i, 0) << what << ": element " << worst_i << " is "
                        << (worst_i >= 0 ? got[worst_i] : 0.0f) << ", reference "
                        << (worst_i >= 0 ? want[worst_i] : 0.0);
}

inline void expect_close(const std::vector<double>& want, const std::vector<float>& got,
                         double rtol, double atol, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  expect_close(want, got.data(), rtol, atol, what);
}

// The shapes batch_norm_test and batch_norm_relu_test run every kernel over: [N, C] and images in
// both layouts, with channels a whole, half or partial vector and several vectors wide.
inline std::vector<BatchNormShape> batch_norm_shapes() {
  return {
      BatchNormShape{2, 1, 1},     // [2, 1]
      BatchNormShape{7, 3, 1},     // [N, C] (BatchNorm1d)
      BatchNormShape{3, 5, 35},    // odd [N, C, 5, 7]
      BatchNormShape{4, 16, 784},  // the ConvNet's first
      BatchNormShape{5, 32, 196},
      BatchNormShape{3, 130, 90},  // 3 channel blocks
      // channels last ([N, H, W, C])
      BatchNormShape{3, 5, 35, true},
      BatchNormShape{3, 4, 35, true},  // half a vector
      BatchNormShape{3, 8, 49, true},  // (8 or 16 lanes)
      BatchNormShape{4, 16, 784, true},
      BatchNormShape{5, 32, 196, true},
      BatchNormShape{3, 130, 90, true},
      BatchNormShape{5, 64, 16, true},
  };
}

}  // namespace dpe::host::testing
