#include "kernels/host/softmax.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/exp_rows.h"

namespace dpe::host {

namespace {
enum : int64_t { kSoftmaxForward = 0x736d7801 };
}  // namespace

// A block of rows at a time: each row's maximum (64 lanes), its exponents x - max in the block's
// scratch with -inf past the causal diagonal (exp(-inf) is exactly 0), oneDNN's JIT exp over the
// block in place, then the normalised row. One scalar libm exp per element made the attention's
// softmax ten times its memory-bound time in gpt-small's step.
void softmax_forward(HostContext& ctx, const SoftmaxShape& s, const float* x, float* y) {
  const int64_t rows = s.batch * s.tq, cols = s.tk;
  if (rows == 0 || cols == 0) return;
  std::vector<uint8_t> nan_row(static_cast<size_t>(rows), 0);
  // Entries [0, valid) of row r take part: all of them, or those up to the query's diagonal.
  const auto valid_of = [&](int64_t r) {
    return s.causal ? std::clamp<int64_t>(r % s.tq + 1 + (s.tk - s.tq), 0, cols) : cols;
  };
  ExpRows::get(ctx, kSoftmaxForward, rows, cols)
      .for_each_block(
          ctx,
          [&](int64_t r, float* e) {
            const float* in = x + r * cols;
            const int64_t valid = valid_of(r);
            const float mx = valid > 0 ? max_of(in, valid) : 0.0f;
            nan_row[r] = !std::isfinite(mx);
#pragma omp simd
            for (int64_t j = 0; j < valid; ++j) e[j] = in[j] - mx;
            std::fill(e + valid, e + cols, -std::numeric_limits<float>::infinity());
          },
          [&](int64_t r, const float* p) {
            float* out = y + r * cols;
            if (nan_row[r]) {  // its entries that take part are NaN, the masked ones 0
              const int64_t valid = valid_of(r);
              std::fill(out, out + valid, std::numeric_limits<float>::quiet_NaN());
              std::fill(out + valid, out + cols, 0.0f);
              return;
            }
            float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < cols; ++j) sum += p[j];
            // A row with nothing left (Tq > Tk) is all 0 (not 0 * inf); a NaN sum stays NaN.
            const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
#pragma omp simd
            for (int64_t j = 0; j < cols; ++j) out[j] = p[j] * inv;
          });
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
