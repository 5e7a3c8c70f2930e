#include "kernels/host/batch_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/reduce.h"

namespace dpe::host {

namespace {

enum : int64_t { kBnScratch = 0x626e01 };

// Channel ch's normalisation as one multiply-add, x * scale + shift. The forward and the fused
// backward (which recomputes the ReLU's mask from x) both take it from here and evaluate it the
// same way, so the backward's mask is bit for bit the forward's: this file is compiled without
// floating-point contraction (kernels/host/BUILD), so every such site rounds the product and the
// sum alike on every CPU, and batch_norm_test pins it where the value is a rounding residual of
// either sign.
struct ChannelAffine {
  float scale, shift;
};
inline ChannelAffine channel_affine(int64_t ch, const float* mean, const float* invstd,
                                    const float* gamma, const float* beta) {
  const float scale = invstd[ch] * (gamma ? gamma[ch] : 1.0f);
  return {scale, (beta ? beta[ch] : 0.0f) - mean[ch] * scale};
}
inline float normalised(float x, ChannelAffine f) { return x * f.scale + f.shift; }

// Chan et al.'s update: a block of `block` values with mean `block_mean` and squared deviations
// `block_sq` merged into a running count, mean and squared deviations (double).
inline void merge_block(double count, double block, float block_mean, float block_sq,
                        double& mean_so_far, double& m2) {
  const double total = count + block;
  const double delta = static_cast<double>(block_mean) - mean_so_far;
  mean_so_far += delta * (block / total);
  m2 += static_cast<double>(block_sq) + delta * delta * (count * block / total);
}

// Per-channel temporaries, kept in the HostContext so a call allocates nothing.
struct ChannelScratch : HostContext::CacheEntry {
  std::vector<float> a, b, c;
  std::vector<ChannelAffine> affine;
  explicit ChannelScratch(int64_t channels)
      : a(channels), b(channels), c(channels), affine(channels) {}
};

ChannelScratch& scratch_for(HostContext& ctx, int64_t channels) {
  return ctx.cached<ChannelScratch>(CacheKey(kBnScratch, {channels}),
                                    [&] { return std::make_unique<ChannelScratch>(channels); });
}

// y = x * scale + shift per plane, then max(., 0) when kRelu (NaN stays NaN, as torch.relu).
template <bool kRelu>
void apply_planes(const BatchNormShape& sh, const float* x, const float* mean, const float* invstd,
                  const float* gamma, const float* beta, float* y) {
  const int64_t planes = sh.n * sh.c;
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const ChannelAffine f = channel_affine(p % sh.c, mean, invstd, gamma, beta);
    const float* in = x + p * sh.s;
    float* out = y + p * sh.s;
#pragma omp simd
    for (int64_t k = 0; k < sh.s; ++k) {
      const float v = normalised(in[k], f);
      out[k] = kRelu && v < 0.0f ? 0.0f : v;
    }
  }
}

// The gradient reaching the batch norm: gy itself, or with the ReLU after it fused, gy where the
// forward's output was positive (relu_backward's y > 0, from the same x * scale + shift).
template <bool kRelu>
inline float masked(float gy, float x, ChannelAffine f) {
  return !kRelu || normalised(x, f) > 0.0f ? gy : 0.0f;
}

// gx = (g - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma, g = masked(gy).
template <bool kRelu>
void elemt_planes(const BatchNormShape& sh, const float* x, const float* gy, const float* mean,
                  const float* invstd, const float* gamma, const float* mean_gy,
                  const float* mean_gy_xmu, const ChannelAffine* affine, float* gx) {
  const int64_t planes = sh.n * sh.c;
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t ch = p % sh.c;
    const float is = invstd[ch], m = mean[ch], mg = mean_gy[ch];
    const float proj = is * is * mean_gy_xmu[ch];
    const float g = is * (gamma ? gamma[ch] : 1.0f);
    const ChannelAffine f = kRelu ? affine[ch] : ChannelAffine{};
    const float* xp = x + p * sh.s;
    const float* gp = gy + p * sh.s;
    float* out = gx + p * sh.s;
#pragma omp simd
    for (int64_t k = 0; k < sh.s; ++k) {
      out[k] = (masked<kRelu>(gp[k], xp[k], f) - mg - (xp[k] - m) * proj) * g;
    }
  }
}

// The training backward: per-channel sums, then gx elementwise (the same two steps SyncBatchNorm
// takes with a reduction across ranks in between). With kRelu, of max(batch_norm(x), 0).
template <bool kRelu>
void backward(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* gy,
              const float* gamma, const float* beta, const float* mean, const float* var, float eps,
              float* gx, float* ggamma, float* gbeta) {
  auto& t = scratch_for(ctx, sh.c);
  // The forward's invstd, computed as it did.
  for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (kRelu) {
    for (int64_t ch = 0; ch < sh.c; ++ch)
      t.affine[ch] = channel_affine(ch, mean, t.c.data(), gamma, beta);
    channel_grad_sums_of(x, gy, mean, t.a.data(), t.b.data(), sh.n, sh.c, sh.s,
                         sh.n * sh.c * sh.s >= kParallelGrain, [&](int64_t ch) {
                           const ChannelAffine f = t.affine[ch];
                           return [f](float g, float v) { return masked<true>(g, v, f); };
                         });
  } else {
    channel_grad_sums(ctx, x, gy, mean, t.a.data(), t.b.data(), sh.n, sh.c, sh.s);
  }
  const float inv_m = 1.0f / static_cast<float>(sh.n * sh.s);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    if (ggamma != nullptr) ggamma[ch] = t.b[ch] * t.c[ch];
    if (gbeta != nullptr) gbeta[ch] = t.a[ch];
    t.a[ch] *= inv_m;  // mean of g
    t.b[ch] *= inv_m;  // mean of g * (x - mean)
  }
  elemt_planes<kRelu>(sh, x, gy, mean, t.c.data(), gamma, t.a.data(), t.b.data(), t.affine.data(),
                      gx);
}

// --- channels last: x laid out [rows = n * s, c], each row's channels contiguous. The loops run
// across the channels (vectorised) and down the rows, with the same per-element arithmetic as the
// planes above (channel_affine, normalised, masked), so the fused backward's mask is the forward's
// here too. Each image's rows (s of them) make one block of the statistics, as each plane does
// above.

// mean[c] and biased var[c]: per image, its mean and squared deviations per channel (float), merged
// into the running totals with Chan et al.'s update (double).
void stats_rows(HostContext& ctx, const BatchNormShape& sh, const float* x, float* mean,
                float* var) {
  auto& t = scratch_for(ctx, sh.c);
  std::vector<double> count_mean(static_cast<size_t>(sh.c), 0.0);
  std::vector<double> m2(static_cast<size_t>(sh.c), 0.0);
  float* sum = t.a.data();
  float* sq = t.b.data();
  double count = 0.0;
  const double block = static_cast<double>(sh.s);
  for (int64_t i = 0; i < sh.n; ++i) {
    const float* img = x + i * sh.s * sh.c;
    std::fill(sum, sum + sh.c, 0.0f);
    for (int64_t r = 0; r < sh.s; ++r) {
      const float* row = img + r * sh.c;
#pragma omp simd
      for (int64_t ch = 0; ch < sh.c; ++ch) sum[ch] += row[ch];
    }
    float* block_mean = t.c.data();
    for (int64_t ch = 0; ch < sh.c; ++ch) block_mean[ch] = sum[ch] / static_cast<float>(sh.s);
    std::fill(sq, sq + sh.c, 0.0f);
    for (int64_t r = 0; r < sh.s; ++r) {
      const float* row = img + r * sh.c;
#pragma omp simd
      for (int64_t ch = 0; ch < sh.c; ++ch) {
        const float d = row[ch] - block_mean[ch];
        sq[ch] += d * d;
      }
    }
    for (int64_t ch = 0; ch < sh.c; ++ch) {
      merge_block(count, block, block_mean[ch], sq[ch], count_mean[ch], m2[ch]);
    }
    count += block;
  }
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    mean[ch] = static_cast<float>(count_mean[ch]);
    var[ch] = static_cast<float>(m2[ch] / count);
  }
}

// Per-channel coefficients as arrays (the loops below read them lane by lane, vectorised).
struct RowCoefficients {
  std::vector<float> scale, shift;  // the normalisation: x * scale + shift
  std::vector<float> proj, factor;  // the backward's elementwise step
  explicit RowCoefficients(int64_t c) : scale(c), shift(c), proj(c), factor(c) {}
};

// scale and shift of every channel, from channel_affine (the planes' own values).
void affine_rows(RowCoefficients& k, int64_t c, const float* mean, const float* invstd,
                 const float* gamma, const float* beta) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const ChannelAffine f = channel_affine(ch, mean, invstd, gamma, beta);
    k.scale[ch] = f.scale;
    k.shift[ch] = f.shift;
  }
}

template <bool kRelu>
void apply_rows(const BatchNormShape& sh, const RowCoefficients& k, const float* x, float* y) {
  const int64_t rows = sh.n * sh.s, c = sh.c;
  const float* scale = k.scale.data();
  const float* shift = k.shift.data();
#pragma omp parallel for if (rows * c >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    float* out = y + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      const float v = normalised(in[ch], ChannelAffine{scale[ch], shift[ch]});
      out[ch] = kRelu && v < 0.0f ? 0.0f : v;
    }
  }
}

// gx = (g - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma, g = masked(gy), with
// the planes' per-channel factors.
template <bool kRelu>
void elemt_rows(const BatchNormShape& sh, RowCoefficients& k, const float* x, const float* gy,
                const float* mean, const float* invstd, const float* gamma, const float* mean_gy,
                const float* mean_gy_xmu, float* gx) {
  const int64_t rows = sh.n * sh.s, c = sh.c;
  for (int64_t ch = 0; ch < c; ++ch) {
    const float is = invstd[ch];
    k.proj[ch] = is * is * mean_gy_xmu[ch];
    k.factor[ch] = is * (gamma ? gamma[ch] : 1.0f);
  }
  const float *proj = k.proj.data(), *factor = k.factor.data();
  const float *scale = k.scale.data(), *shift = k.shift.data();
#pragma omp parallel for if (rows * c >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xp = x + r * c;
    const float* gp = gy + r * c;
    float* out = gx + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      const float g = masked<kRelu>(gp[ch], xp[ch], ChannelAffine{scale[ch], shift[ch]});
      out[ch] = (g - mean_gy[ch] - (xp[ch] - mean[ch]) * proj[ch]) * factor[ch];
    }
  }
}

template <bool kRelu>
void backward_rows(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* gy,
                   const float* gamma, const float* beta, const float* mean, const float* var,
                   float eps, float* gx, float* ggamma, float* gbeta) {
  auto& t = scratch_for(ctx, sh.c);
  const int64_t rows = sh.n * sh.s, c = sh.c;
  for (int64_t ch = 0; ch < c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  RowCoefficients k(c);  // scale and shift stay 0 without the ReLU: masked<false> reads neither
  if (kRelu) affine_rows(k, c, mean, t.c.data(), gamma, beta);
  const float *scale = k.scale.data(), *shift = k.shift.data();
  // Per-channel sums of g and g * (x - mean): each image's in float (its s rows, as each plane's
  // in NCHW), merged in double.
  std::vector<double> sum_g(static_cast<size_t>(c), 0.0), sum_gx(static_cast<size_t>(c), 0.0);
  std::vector<float> part_g(static_cast<size_t>(c)), part_gx(static_cast<size_t>(c));
  float* pg_sum = part_g.data();
  float* px_sum = part_gx.data();
  for (int64_t i = 0; i < sh.n; ++i) {
    std::fill(pg_sum, pg_sum + c, 0.0f);
    std::fill(px_sum, px_sum + c, 0.0f);
    for (int64_t r = i * sh.s; r < (i + 1) * sh.s; ++r) {
      const float* xp = x + r * c;
      const float* gp = gy + r * c;
#pragma omp simd
      for (int64_t ch = 0; ch < c; ++ch) {
        const float g = masked<kRelu>(gp[ch], xp[ch], ChannelAffine{scale[ch], shift[ch]});
        pg_sum[ch] += g;
        px_sum[ch] += g * (xp[ch] - mean[ch]);
      }
    }
    for (int64_t ch = 0; ch < c; ++ch) {
      sum_g[ch] += pg_sum[ch];
      sum_gx[ch] += px_sum[ch];
    }
  }
  const float inv_m = 1.0f / static_cast<float>(rows);
  for (int64_t ch = 0; ch < c; ++ch) {
    t.a[ch] = static_cast<float>(sum_g[ch]);
    t.b[ch] = static_cast<float>(sum_gx[ch]);
    if (ggamma != nullptr) ggamma[ch] = t.b[ch] * t.c[ch];
    if (gbeta != nullptr) gbeta[ch] = t.a[ch];
    t.a[ch] *= inv_m;
    t.b[ch] *= inv_m;
  }
  elemt_rows<kRelu>(sh, k, x, gy, mean, t.c.data(), gamma, t.a.data(), t.b.data(), gx);
}

}  // namespace

void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var, bool relu) {
  if (sh.channels_last) {
    stats_rows(ctx, sh, x, mean, var);
    auto& t = scratch_for(ctx, sh.c);
    for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, t.c.data(), gamma, beta);
    relu ? apply_rows<true>(sh, k, x, y) : apply_rows<false>(sh, k, x, y);
    return;
  }
  // One read of x: each plane's mean and squared deviations from it (its second loop reads the
  // plane from L1), merged into the channel's running count, mean and squared deviations with
  // Chan et al.'s update, in double. As stable as two passes over the batch (torch's CPU kernel:
  // no cancellation from E[x^2] - E[x]^2), and at batch 256 a whole pass over 12.8 MB cheaper.
  reduce_channels<3>(
      sh.n, sh.c, sh.s, sh.n * sh.c * sh.s >= kParallelGrain,
      [&](int64_t, int64_t offset, std::array<double, 3>& acc) {
        const float* p = x + offset;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t k = 0; k < sh.s; ++k) sum += p[k];
        const float plane_mean = sum / static_cast<float>(sh.s);
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t k = 0; k < sh.s; ++k) sq += (p[k] - plane_mean) * (p[k] - plane_mean);
        auto& [count, mean_so_far, m2] = acc;
        const double s = static_cast<double>(sh.s);
        merge_block(count, s, plane_mean, sq, mean_so_far, m2);
        count += s;
      },
      [&](int64_t ch, const std::array<double, 3>& acc) {
        mean[ch] = static_cast<float>(acc[1]);
        var[ch] = static_cast<float>(acc[2] / acc[0]);
      });
  auto& scratch = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) scratch.a[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (relu) {
    apply_planes<true>(sh, x, mean, scratch.a.data(), gamma, beta, y);
  } else {
    apply_planes<false>(sh, x, mean, scratch.a.data(), gamma, beta, y);
  }
}

void batch_norm_forward_eval(HostContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y) {
  auto& scratch = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) scratch.a[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, scratch.a.data(), gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, x, mean, scratch.a.data(), gamma, beta, y);
}

void batch_norm_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  if (sh.channels_last) {
    backward_rows<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  backward<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_relu_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gy, const float* gamma, const float* beta,
                              const float* mean, const float* var, float eps, float* gx,
                              float* ggamma, float* gbeta) {
  if (sh.channels_last) {
    backward_rows<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  backward<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_apply(HostContext& ctx, const BatchNormShape& sh, const float* x,
                      const float* mean, const float* invstd, const float* gamma, const float* beta,
                      float* y) {
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, invstd, gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, x, mean, invstd, gamma, beta, y);
}

void batch_norm_backward_elemt(HostContext&, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    elemt_rows<false>(sh, k, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx);
    return;
  }
  elemt_planes<false>(sh, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, nullptr, gx);
}

}  // namespace dpe::host
