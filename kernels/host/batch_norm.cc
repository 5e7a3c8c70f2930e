#include "kernels/host/batch_norm.h"

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

}  // namespace

void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var, bool relu) {
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
        const double s = static_cast<double>(sh.s), total = count + s;
        const double delta = static_cast<double>(plane_mean) - mean_so_far;
        mean_so_far += delta * (s / total);
        m2 += static_cast<double>(sq) + delta * delta * (count * s / total);
        count = total;
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
  apply_planes<false>(sh, x, mean, scratch.a.data(), gamma, beta, y);
}

void batch_norm_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  backward<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_relu_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gy, const float* gamma, const float* beta,
                              const float* mean, const float* var, float eps, float* gx,
                              float* ggamma, float* gbeta) {
  backward<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_apply(HostContext&, const BatchNormShape& sh, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y) {
  apply_planes<false>(sh, x, mean, invstd, gamma, beta, y);
}

void batch_norm_backward_elemt(HostContext&, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  elemt_planes<false>(sh, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, nullptr, gx);
}

}  // namespace dpe::host
