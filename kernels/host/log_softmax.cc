#include "kernels/host/log_softmax.h"

#include <cmath>
#include <limits>

#include "kernels/host/elementwise.h"

namespace dpe::host {

void log_softmax_forward(HostContext&, const float* x, float* y, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < cols; ++j) mx = std::fmax(mx, in[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(in[j] - mx);
    const float lse = mx + std::log(sum);
    for (int64_t j = 0; j < cols; ++j) out[j] = in[j] - lse;
  }
}

void log_softmax_backward(HostContext&, const float* y, const float* gy, float* gx, int64_t rows,
                          int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* gr = gy + r * cols;
    float* out = gx + r * cols;
    float sum = 0.0f;
    for (int64_t j = 0; j < cols; ++j) sum += gr[j];
    for (int64_t j = 0; j < cols; ++j) out[j] = gr[j] - std::exp(yr[j]) * sum;
  }
}

}  // namespace dpe::host
