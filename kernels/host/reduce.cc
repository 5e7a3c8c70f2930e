#include "kernels/host/reduce.h"

#include <cmath>

#include "kernels/host/elementwise.h"

namespace dpe::host {

void sum_all(HostContext&, const float* x, float* out, int64_t n) {
  double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) total += x[i];
  out[0] = static_cast<float>(total);
}

void sum_squares(HostContext&, const float* x, float* out, int64_t n) {
  double total = 0.0;
#pragma omp parallel for simd reduction(+ : total) if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float sq = x[i] * x[i];
    total += sq;
  }
  out[0] = static_cast<float>(total);
}

void argmax_rows(HostContext&, const float* x, int64_t* out, int64_t rows, int64_t cols) {
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    int64_t best = 0;
    for (int64_t j = 1; j < cols; ++j) {
      if (std::isnan(row[best])) break;
      if (row[j] > row[best] || std::isnan(row[j])) best = j;
    }
    out[r] = cols > 0 ? best : -1;
  }
}

bool all_finite(HostContext&, const float* x, int64_t n) {
  // x - x is 0 for finite x and NaN for inf or NaN; summing keeps the loop branch-free.
  float acc = 0.0f;
#pragma omp parallel for simd reduction(+ : acc) if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) acc += x[i] - x[i];
  return acc == 0.0f;
}

void channel_sums(HostContext&, const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                  int64_t s) {
  reduce_channels<2>(
      n, c, s, n * c * s >= kParallelGrain,
      [&](int64_t, int64_t offset, std::array<double, 2>& acc) {
        const float* p = x + offset;
        float a1 = 0.0f, a2 = 0.0f;
#pragma omp simd reduction(+ : a1, a2)
        for (int64_t k = 0; k < s; ++k) {
          a1 += p[k];
          a2 += p[k] * p[k];
        }
        acc[0] += a1;
        acc[1] += a2;
      },
      [&](int64_t ch, const std::array<double, 2>& acc) {
        sum[ch] = static_cast<float>(acc[0]);
        sumsq[ch] = static_cast<float>(acc[1]);
      });
}

void channel_grad_sums(HostContext&, const float* x, const float* gy, const float* mean,
                       float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c, int64_t s) {
  channel_grad_sums_of(x, gy, mean, sum_gy, sum_gy_xmu, n, c, s, n * c * s >= kParallelGrain,
                       [](int64_t) { return [](float g, float) { return g; }; });
}

}  // namespace dpe::host
