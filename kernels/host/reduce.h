// Host reductions: sum of all elements, per-row argmax, the finiteness check, and the
// per-channel sums that batch norm (and SyncBatchNorm between ranks) is built from.
// Layout for channel reductions: x is [N, C, S] contiguous (S = H*W, or 1 for [N, C]).
#pragma once

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// out[0] = the sum of x's n elements, accumulated in double, so the result does not depend on the
// thread count beyond rounding.
void sum_all(HostContext& ctx, const float* x, float* out, int64_t n);
// out[0] = sum_all of the float squares x[i] * x[i], in one pass.
void sum_squares(HostContext& ctx, const float* x, float* out, int64_t n);
// out[i] = index of the first maximum of row i of x [rows, cols]; a NaN counts as the maximum.
void argmax_rows(HostContext& ctx, const float* x, int64_t* out, int64_t rows, int64_t cols);
bool all_finite(HostContext& ctx, const float* x, int64_t n);
// sum[c] = sum x[:, c, :], sumsq[c] = sum x[:, c, :]^2.
void channel_sums(HostContext& ctx, const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                  int64_t s);
// sum_gy[c] = sum gy[:, c, :], sum_gy_xmu[c] = sum gy[:, c, :] * (x[:, c, :] - mean[c]).
void channel_grad_sums(HostContext& ctx, const float* x, const float* gy, const float* mean,
                       float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c, int64_t s);

// Per-channel reductions over [N, C, S] planes, read in memory order. Each thread takes a block
// of channels and walks the batch, reading a block of consecutive planes at a time; a channel at
// a time would jump C planes between reads, which the prefetchers follow poorly (the ConvNet's
// batch-norm sums at batch 256 ran at half the speed). Each channel's planes still come in batch
// order, so the sums are the same as a channel at a time.
// plane(ch, offset, acc): reduce the plane at x + offset into channel ch's K double accumulators;
// done(ch, acc): called once per channel with its totals.
constexpr int64_t kChannelBlock = 64;
template <int K, typename Plane, typename Done>
void reduce_channels(int64_t n, int64_t c, int64_t s, bool parallel, Plane plane, Done done) {
  const int64_t threads = parallel ? omp_get_max_threads() : 1;
  const int64_t block = std::clamp<int64_t>((c + threads - 1) / threads, 1, kChannelBlock);
#pragma omp parallel for if (parallel)
  for (int64_t c0 = 0; c0 < c; c0 += block) {
    const int64_t c1 = std::min(c, c0 + block);
    std::array<double, K> acc[kChannelBlock] = {};
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t ch = c0; ch < c1; ++ch) plane(ch, (i * c + ch) * s, acc[ch - c0]);
    }
    for (int64_t ch = c0; ch < c1; ++ch) done(ch, acc[ch - c0]);
  }
}

// One plane's float sums of g = grad(gy, x) and of g * (x - m), as channel_grad_sums_of adds them
// up: one function, not inlined, so that a caller summing the planes in its own loop (batch norm
// fused with pooling) gets the same vectorised sums, bit for bit.
template <typename Grad>
[[gnu::noinline]] std::array<float, 2> plane_grad_sums(const float* px, const float* pg, float m,
                                                       int64_t s, Grad grad) {
  float a1 = 0.0f, a2 = 0.0f;
#pragma omp simd reduction(+ : a1, a2)
  for (int64_t k = 0; k < s; ++k) {
    const float g = grad(pg[k], px[k]);
    a1 += g;
    a2 += g * (px[k] - m);
  }
  return {a1, a2};
}

// channel_grad_sums of g = grad_of(ch)(gy, x) in place of gy, over the same planes in the same
// order: the identity gives channel_grad_sums, and batch norm fused with a ReLU masks gy with it.
template <typename GradOf>
void channel_grad_sums_of(const float* x, const float* gy, const float* mean, float* sum_gy,
                          float* sum_gy_xmu, int64_t n, int64_t c, int64_t s, bool parallel,
                          GradOf grad_of) {
  reduce_channels<2>(
      n, c, s, parallel,
      [&](int64_t ch, int64_t offset, std::array<double, 2>& acc) {
        const std::array<float, 2> a =
            plane_grad_sums(x + offset, gy + offset, mean[ch], s, grad_of(ch));
        acc[0] += a[0];
        acc[1] += a[1];
      },
      [&](int64_t ch, const std::array<double, 2>& acc) {
        sum_gy[ch] = static_cast<float>(acc[0]);
        sum_gy_xmu[ch] = static_cast<float>(acc[1]);
      });
}

}  // namespace dpe::host
