#include "kernels/host/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/host/elementwise.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

// A row at a time: its maximum, exp(x - max) written with its sum (the exponentials in
// registers), then the row scaled by 1 / sum; entries past the causal diagonal are 0. One scalar
// libm exp per element made the attention's softmax ten times its memory-bound time in
// gpt-small's step, oneDNN's JIT exp over a scratch three times.
void softmax_forward(HostContext&, const SoftmaxShape& s, const float* x, float* y) {
  const int64_t rows = s.batch * s.tq, cols = s.tk;
  if (rows == 0 || cols == 0) return;
#pragma omp parallel for if (rows * cols >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * cols;
    float* out = y + r * cols;
    // Entries [0, valid) take part: all of them, or those up to the query's diagonal.
    const int64_t valid =
        s.causal ? std::clamp<int64_t>(r % s.tq + 1 + (s.tk - s.tq), 0, cols) : cols;
    std::fill(out + valid, out + cols, 0.0f);
    if (valid == 0) continue;  // a row with nothing left (Tq > Tk) is all 0
    const float mx = vec::max_of(in, valid);
    if (!std::isfinite(mx)) {  // its entries that take part are NaN, the masked ones 0
      std::fill(out, out + valid, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float inv = 1.0f / vec::exp_store(in, valid, mx, out);
#pragma omp simd
    for (int64_t j = 0; j < valid; ++j) out[j] *= inv;
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
