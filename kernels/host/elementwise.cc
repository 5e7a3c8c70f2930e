#include "kernels/host/elementwise.h"

namespace dpe::host {

void add_forward(HostContext&, const float* a, const float* b, float alpha, float* out, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + alpha * b[i];
}

void mul_forward(HostContext&, const float* a, const float* b, float* out, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
}

void scale_forward(HostContext&, const float* a, float s, float* out, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) out[i] = s * a[i];
}

void relu_forward(HostContext&, const float* x, float* y, int64_t n) {
  // NaN stays NaN, as in torch.relu: (x > 0 ? x : 0) would turn it into 0.
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

void relu_backward(HostContext&, const float* y, const float* gy, float* gx, int64_t n) {
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) gx[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}

}  // namespace dpe::host
