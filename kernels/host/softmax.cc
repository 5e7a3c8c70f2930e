#include "kernels/host/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/host/elementwise.h"

namespace dpe::host {

void softmax_forward(HostContext&, const SoftmaxShape& s, const float* x, float* y) {
  const int64_t rows = s.batch * s.tq, cols = s.tk;
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    // Entries [0, valid) take part: all of them, or those up to the query's diagonal.
    const int64_t q = r % s.tq;
    const int64_t valid =
        s.causal ? std::clamp<int64_t>(q + 1 + (s.tk - s.tq), 0, cols) : cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < valid; ++j) mx = std::fmax(mx, in[j]);
    float sum = 0.0f;
    for (int64_t j = 0; j < valid; ++j) {
      out[j] = std::exp(in[j] - mx);
      sum += out[j];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t j = 0; j < valid; ++j) out[j] *= inv;
    for (int64_t j = valid; j < cols; ++j) out[j] = 0.0f;
  }
}

void softmax_backward(HostContext&, const float* y, const float* gy, float* gx, int64_t rows,
                      int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* gr = gy + r * cols;
    float* out = gx + r * cols;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < cols; ++j) dot += gr[j] * yr[j];
#pragma omp simd
    for (int64_t j = 0; j < cols; ++j) out[j] = yr[j] * (gr[j] - dot);
  }
}

}  // namespace dpe::host
