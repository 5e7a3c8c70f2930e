#include "kernels/host/gelu.h"

#include <cmath>

#include "kernels/host/elementwise.h"

namespace dpe::host {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(HostContext&, const float* x, float* y, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v)));
  }
}

void gelu_backward(HostContext&, const float* x, const float* gy, float* gx, int64_t n) {
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float t = std::tanh(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    gx[i] = gy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
}

}  // namespace dpe::host
