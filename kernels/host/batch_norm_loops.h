// The per-channel loops every host batch norm kernel shares (batch_norm.cc and the fused
// kernels' batch_norm_relu.cc): the normalisation as one multiply-add, the sums down the rows in
// chains, the statistics, each layout's output pass, elementwise step and training backward.
// Internal to the kernels, compiled as they are, without floating-point contraction (BUILD).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/host/elementwise.h"
#include "kernels/host/host_context.h"
#include "kernels/host/reduce.h"
#include "kernels/host/vector_exp.h"
#include "kernels/op_params.h"

namespace dpe::host::bn {

// Channel ch's normalisation as one multiply-add, x * scale + shift. The forward and the fused
// backward (which recomputes the ReLU's mask from x) both take it from here and evaluate it the
// same way, so the backward's mask is bit for bit the forward's: every file that includes this one
// is compiled without floating-point contraction (kernels/host/BUILD), so every such site rounds
// the product and the sum alike on every CPU, and batch_norm_relu_test pins it where the value is
// a rounding residual of either sign.
struct ChannelAffine {
  float scale, shift;
};
inline ChannelAffine channel_affine(int64_t ch, const float* mean, const float* invstd,
                                    const float* gamma, const float* beta) {
  const float scale = invstd[ch] * (gamma ? gamma[ch] : 1.0f);
  return {scale, (beta ? beta[ch] : 0.0f) - mean[ch] * scale};
}
inline float normalised(float x, ChannelAffine f) { return x * f.scale + f.shift; }

// Sums down an image's rows (channels last) run as kRowChains interleaved partial sums per
// channel, row r into chain r % kRowChains, added pairwise at the end. Where a row is a few whole
// vectors (chain_sums_in_registers) the chains live in registers; otherwise in memory, where with
// one chain each row's add would wait on the previous row's store (store-to-load forwarding).
// With 16 channels the chains in memory still waited on it: batch norm + ReLU + pooling over
// [256, 16, 28, 28] took 1.25x (backward) to 1.45x (forward) its time with them in registers.
constexpr int64_t kRowChains = 4;

// The row kernels load the per-channel arrays a whole vector at a time, the last one too (masked
// where it runs past c), so those arrays are padded to whole vectors. Channels last with half a
// vector a row (c = kLanes / 2: 8 channels with AVX-512, ResNet's stem and first stage), two rows
// share a register, and the arrays hold their c values twice.
inline bool half_rows(int64_t c) { return 2 * c == vec::kLanes; }
inline int64_t padded(int64_t c) { return (c + vec::kLanes - 1) / vec::kLanes * vec::kLanes; }
inline void tile_half(float* per_channel, int64_t c) {
  if (half_rows(c)) std::copy(per_channel, per_channel + c, per_channel + c);
}

// The same chains in registers where a row is V whole vectors: row r's K terms (terms(r, v, lanes,
// t) fills t[0..K) with those of vector v, whose first `lanes` lanes are x's) added into chain r %
// kRowChains in row order, the adds of the loop over memory chains without its store-to-load
// round trips; the chains are then stored to chains[q] (kRowChains runs of c each) for add_chains.
// V = 0: half a vector a row, rows 4i and 4i+1 in one register (chains 0 and 1 side by side, as
// they lie in memory) and 4i+2, 4i+3 in another; a lone last row's other half adds +0, which
// leaves a chain as it was (a sum started at +0 is never -0).
template <int V, int K, class Terms>
void chain_sums_in_registers(int64_t s, int64_t c, const Terms& terms, float* const* chains) {
  static_assert(kRowChains == 4, "rows are taken four at a time");
  if constexpr (V == 0) {
    vec::F acc[K][2] = {};
    vec::I low{};
    for (int64_t i = 0; i < vec::kLanes / 2; ++i) low[i] = -1;
    const auto add = [&](int64_t r, int j, int64_t lanes) __attribute__((always_inline)) {
      vec::F t[K];
      terms(r, 0, lanes, t);
      for (int q = 0; q < K; ++q) {
        acc[q][j] += lanes == vec::kLanes ? t[q] : (vec::F)((vec::I)t[q] & low);
      }
    };
    int64_t r = 0;
    for (; r + kRowChains <= s; r += kRowChains) {
      add(r, 0, vec::kLanes);
      add(r + 2, 1, vec::kLanes);
    }
    if (r + 1 < s) {
      add(r, 0, vec::kLanes);
    } else if (r < s) {
      add(r, 0, vec::kLanes / 2);
    }
    if (r + 2 < s) add(r + 2, 1, vec::kLanes / 2);
    for (int q = 0; q < K; ++q) {
      for (int j = 0; j < 2; ++j) vec::store(chains[q] + j * vec::kLanes, acc[q][j]);
    }
    (void)c;  // c = kLanes / 2: chain j starts at j * c, a pair of chains a vector
  } else {
    vec::F acc[K][kRowChains][V] = {};
    // Chain j a constant at every call, so that acc stays in registers.
    const auto add_row = [&](int64_t r, int j) __attribute__((always_inline)) {
      for (int v = 0; v < V; ++v) {
        vec::F t[K];
        terms(r, v, vec::kLanes, t);
        for (int q = 0; q < K; ++q) acc[q][j][v] += t[q];
      }
    };
    int64_t r = 0;
    for (; r + kRowChains <= s; r += kRowChains) {
      add_row(r, 0);
      add_row(r + 1, 1);
      add_row(r + 2, 2);
      add_row(r + 3, 3);
    }
    if (r < s) add_row(r, 0);
    if (r + 1 < s) add_row(r + 1, 1);
    if (r + 2 < s) add_row(r + 2, 2);
    for (int q = 0; q < K; ++q) {
      for (int j = 0; j < kRowChains; ++j) {
        for (int v = 0; v < V; ++v) vec::store(chains[q] + j * c + v * vec::kLanes, acc[q][j][v]);
      }
    }
  }
}

// Calls f(std::integral_constant<int, V>{}) where c is V whole vectors, V <= max_vectors (so that
// the chains of the caller's sums fit the registers), or half of one (V = 0); returns false (f not
// called) otherwise.
template <class F>
bool with_row_vectors(int64_t c, int max_vectors, const F& f) {
  if (half_rows(c)) {
    f(std::integral_constant<int, 0>{});
    return true;
  }
  if (c % vec::kLanes != 0) return false;
  const int64_t v = c / vec::kLanes;
  if (v > max_vectors) return false;
  switch (v) {
    case 1:
      f(std::integral_constant<int, 1>{});
      return true;
    case 2:
      f(std::integral_constant<int, 2>{});
      return true;
    case 3:
      f(std::integral_constant<int, 3>{});
      return true;
    case 4:
      f(std::integral_constant<int, 4>{});
      return true;
    default:
      return false;
  }
}

// Per-channel temporaries, kept in the HostContext so a call allocates nothing.
struct ChannelScratch : HostContext::CacheEntry {
  std::vector<float> a, b, c;  // padded (padded(), tile_half())
  std::vector<float> chains;   // kRowChains partial sums per channel
  std::vector<ChannelAffine> affine;
  explicit ChannelScratch(int64_t channels)
      : a(padded(channels)),
        b(padded(channels)),
        c(padded(channels)),
        chains(kRowChains * channels),
        affine(channels) {}
};

ChannelScratch& scratch_for(HostContext& ctx, int64_t channels);

// y = x * scale + shift per plane, plus the residual's element when kResidual (the residual sum
// fused), then max(., 0) when kRelu (NaN stays NaN, as torch.relu), for `planes` planes from plane
// `first` of the batch on (x, residual and y point at that plane).
template <bool kRelu, bool kResidual = false>
void apply_planes(const BatchNormShape& sh, int64_t first, int64_t planes, const float* x,
                  const float* mean, const float* invstd, const float* gamma, const float* beta,
                  float* y, const float* residual = nullptr) {
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const ChannelAffine f = channel_affine((first + p) % sh.c, mean, invstd, gamma, beta);
    const float* in = x + p * sh.s;
    const float* res = kResidual ? residual + p * sh.s : nullptr;
    float* out = y + p * sh.s;
#pragma omp simd
    for (int64_t k = 0; k < sh.s; ++k) {
      float v = normalised(in[k], f);
      if (kResidual) v = v + res[k];
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

// masked<true> as the per-element gradient plane_grad_sums takes: one type for every caller, so
// the plain and the pooling-fused backward share one compiled instance of the sums.
struct ReluMasked {
  ChannelAffine f;
  float operator()(float gy, float x) const { return masked<true>(gy, x, f); }
};

// gx = (g - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma, g = masked(gy), for
// `planes` planes from plane `first` of the batch on (x, gy and gx point at that plane).
template <bool kRelu>
void elemt_planes(const BatchNormShape& sh, int64_t first, int64_t planes, const float* x,
                  const float* gy, const float* mean, const float* invstd, const float* gamma,
                  const float* mean_gy, const float* mean_gy_xmu, const ChannelAffine* affine,
                  float* gx) {
#pragma omp parallel for if (planes * sh.s >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const int64_t ch = (first + p) % sh.c;
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

// From the sums of g (t.a) and of g * (x - mean) (t.b) and invstd (t.c): the parameters' gradients
// and, in t.a and t.b, the means the elementwise step takes.
void grad_coefficients(const BatchNormShape& sh, ChannelScratch& t, float* ggamma, float* gbeta);

// The training backward: per-channel sums, then gx elementwise (the same two steps SyncBatchNorm
// takes with a reduction across ranks in between). With kRelu, of max(batch_norm(x), 0).
template <bool kRelu>
void backward_planes(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* gy,
                     const float* gamma, const float* beta, const float* mean, const float* var,
                     float eps, float* gx, float* ggamma, float* gbeta) {
  auto& t = scratch_for(ctx, sh.c);
  // The forward's invstd, computed as it did.
  for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (kRelu) {
    for (int64_t ch = 0; ch < sh.c; ++ch)
      t.affine[ch] = channel_affine(ch, mean, t.c.data(), gamma, beta);
    channel_grad_sums_of(x, gy, mean, t.a.data(), t.b.data(), sh.n, sh.c, sh.s,
                         sh.n * sh.c * sh.s >= kParallelGrain,
                         [&](int64_t ch) { return ReluMasked{t.affine[ch]}; });
  } else {
    channel_grad_sums(ctx, x, gy, mean, t.a.data(), t.b.data(), sh.n, sh.c, sh.s);
  }
  grad_coefficients(sh, t, ggamma, gbeta);
  elemt_planes<kRelu>(sh, 0, sh.n * sh.c, x, gy, mean, t.c.data(), gamma, t.a.data(), t.b.data(),
                      t.affine.data(), gx);
}

// --- channels last: x laid out [rows = n * s, c], each row's channels contiguous. The loops run
// across the channels (vectorised) and down the rows, with the same per-element arithmetic as the
// planes above (channel_affine, normalised, masked), so the fused backward's mask is the forward's
// here too. A block of the statistics and of the backward's sums is a run of whole images (as a
// plane is above) of at least kBlockRows rows: its float sums, then one merge per channel in
// double. At one image a block, images of 1x1 to 7x7 (a ResNet's last stages) spent 5-10x the
// reading of x on the per-block work (four chains of c floats, a merge with a division each).
constexpr int64_t kBlockRows = 64;
inline int64_t images_per_block(int64_t s) {
  return std::max<int64_t>(1, (kBlockRows + s - 1) / s);
}

// Per-channel coefficients as arrays (the loops below read them lane by lane, vectorised), those
// read a vector at a time padded (padded(), tile_half()).
struct RowCoefficients {
  std::vector<float> scale, shift;     // the normalisation: x * scale + shift
  std::vector<float> proj, factor;     // the backward's elementwise step
  std::vector<float> mean;             // the batch's, for the backward's sums
  std::vector<float> part_g, part_gx;  // the backward's sums over one image, kRowChains each
  std::vector<float> total;            // the chains' total, per channel
  explicit RowCoefficients(int64_t c)
      : scale(padded(c)),
        shift(padded(c)),
        proj(padded(c)),
        factor(padded(c)),
        mean(padded(c)),
        part_g(kRowChains * c),
        part_gx(kRowChains * c),
        total(c) {}
};

// scale and shift of every channel, from channel_affine (the planes' own values), and the mean.
void affine_rows(RowCoefficients& k, int64_t c, const float* mean, const float* invstd,
                 const float* gamma, const float* beta);

// A vector of per-channel values for rows of c = kLanes / 2 channels: p's c values twice.
inline vec::F tiled(const float* p, int64_t c) {
  vec::F v;
  for (int64_t i = 0; i < vec::kLanes; ++i) v[i] = p[i % c];
  return v;
}

// The ReLU's mask on g, from the normalised value nv = x * scale + shift (the forward's output
// before the ReLU): g where nv > 0, else +0 (NaN masks), on one element or a vector of them.
inline float relu_masked(float g, float nv) { return nv > 0.0f ? g : 0.0f; }
inline vec::F relu_masked(vec::F g, vec::F nv) {
  return (vec::F)((vec::I)g & (nv > vec::splat(0.0f)));
}

// The backward's elementwise step, gx = (g - mean_gy - (x - mean) * proj) * factor, on one
// element or a vector of them: every layout and fusion computes it here.
template <class T>
inline T elemt_value(T g, T x, T mean_gy, T mean, T proj, T factor) {
  return (g - mean_gy - (x - mean) * proj) * factor;
}

// Rows of half a vector (c = kLanes / 2): the batch as one run of floats, every vector two rows
// with the same channels: f(i, lanes) for each vector from float i on, its first `lanes` lanes in
// the batch.
template <class F>
void for_each_vector(int64_t floats, const F& f) {
  const int64_t vectors = (floats + vec::kLanes - 1) / vec::kLanes;
#pragma omp parallel for if (floats >= kParallelGrain)
  for (int64_t v = 0; v < vectors; ++v) {
    const int64_t i = v * vec::kLanes;
    f(i, std::min(vec::kLanes, floats - i));
  }
}

// As apply_planes, on rows of channels.
template <bool kRelu, bool kResidual = false>
void apply_rows(const BatchNormShape& sh, const RowCoefficients& k, const float* x, float* y,
                const float* residual = nullptr) {
  const int64_t rows = sh.n * sh.s, c = sh.c;
  const float* scale = k.scale.data();
  const float* shift = k.shift.data();
  if (half_rows(c)) {
    const vec::F sv = vec::load(scale), hv = vec::load(shift);
    for_each_vector(rows * c, [&](int64_t i, int64_t lanes) {
      vec::F v = vec::load_n(x + i, lanes, 0.0f) * sv + hv;
      if (kResidual) v = v + vec::load_n(residual + i, lanes, 0.0f);
      vec::store_n(y + i, kRelu ? (v < vec::splat(0.0f) ? vec::splat(0.0f) : v) : v, lanes);
    });
    return;
  }
#pragma omp parallel for if (rows * c >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x + r * c;
    const float* res = kResidual ? residual + r * c : nullptr;
    float* out = y + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      float v = normalised(in[ch], ChannelAffine{scale[ch], shift[ch]});
      if (kResidual) v = v + res[ch];
      out[ch] = kRelu && v < 0.0f ? 0.0f : v;
    }
  }
}

// The elementwise step's per-channel factors: proj = invstd^2 * mean_gy_xmu, factor = invstd *
// gamma.
void elemt_factors(RowCoefficients& k, int64_t c, const float* invstd, const float* gamma,
                   const float* mean_gy_xmu);

// gx = (g - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma, g = masked(gy), with
// the planes' per-channel factors.
template <bool kRelu>
void elemt_rows(const BatchNormShape& sh, RowCoefficients& k, const float* x, const float* gy,
                const float* mean, const float* invstd, const float* gamma, const float* mean_gy,
                const float* mean_gy_xmu, float* gx) {
  const int64_t rows = sh.n * sh.s, c = sh.c;
  elemt_factors(k, c, invstd, gamma, mean_gy_xmu);
  const float *proj = k.proj.data(), *factor = k.factor.data();
  const float *scale = k.scale.data(), *shift = k.shift.data();
  if (half_rows(c)) {
    const vec::F pv = vec::load(proj), fv = vec::load(factor), sv = vec::load(scale),
                 hv = vec::load(shift), mv = tiled(mean, c), gv = tiled(mean_gy, c);
    for_each_vector(rows * c, [&](int64_t i, int64_t lanes) {
      const vec::F xv = vec::load_n(x + i, lanes, 0.0f);
      vec::F g = vec::load_n(gy + i, lanes, 0.0f);
      if (kRelu) g = relu_masked(g, xv * sv + hv);
      vec::store_n(gx + i, elemt_value(g, xv, gv, mv, pv, fv), lanes);
    });
    return;
  }
#pragma omp parallel for if (rows * c >= kParallelGrain)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xp = x + r * c;
    const float* gp = gy + r * c;
    float* out = gx + r * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) {
      const float g = masked<kRelu>(gp[ch], xp[ch], ChannelAffine{scale[ch], shift[ch]});
      out[ch] = elemt_value(g, xp[ch], mean_gy[ch], mean[ch], proj[ch], factor[ch]);
    }
  }
}

// masked<true>(g, x) over a vector of channels from `at` on: g where the fused ReLU's input,
// recomputed from x, is positive.
inline vec::F relu_of_x(const RowCoefficients& k, int64_t at, vec::F xv, vec::F g) {
  return relu_masked(g, xv * vec::load(k.scale.data() + at) + vec::load(k.shift.data() + at));
}

// The two terms the backward sums, over a vector of channels from `at` on: t[0] = g, t[1] = g * (x
// - mean).
inline void grad_terms(const float* mean, int64_t at, vec::F xv, vec::F g, vec::F* t) {
  t[0] = g;
  t[1] = g * (xv - vec::load(mean + at));
}

// The image's per-channel float sums, left in its kRowChains chains, added to the running totals
// sum_g and sum_gx (double).
void add_chain_totals(RowCoefficients& k, int64_t c, double* sum_g, double* sum_gx);

// The gradient reaching the batch norm, for add_block_grad_sums: gy, masked by the fused ReLU's
// mask recomputed from x when kRelu: the vector of the channels from `at` on of row r (two rows
// with half a vector a row), its first `lanes` lanes x's.
template <bool kRelu>
struct InputGradient {
  const RowCoefficients& k;
  const float* gy;
  int64_t c;
  vec::F operator()(int64_t r, int64_t at, int64_t lanes, vec::F xv) const {
    const vec::F g = vec::load_n(gy + r * c + at, lanes, 0.0f);
    return kRelu ? relu_of_x(k, at, xv, g) : g;
  }
};

// One block's (`rows` rows of x) sums of g = grad(r, at, lanes, x's vector) and g * (x - mean) per
// channel, in float, added to the running totals sum_g and sum_gx (double). k holds the mean
// (affine_rows).
template <class Grad>
void add_block_grad_sums(int64_t rows, int64_t c, RowCoefficients& k, const float* x,
                         const Grad& grad, double* sum_g, double* sum_gx) {
  const float* mean = k.mean.data();
  float* pg_chains = k.part_g.data();
  float* px_chains = k.part_gx.data();
  float* const both[2] = {pg_chains, px_chains};
  const bool in_registers = with_row_vectors(c, 2, [&](auto vectors) {
    chain_sums_in_registers<vectors(), 2>(
        rows, c,
        [&](int64_t r, int v, int64_t lanes, vec::F* t) {
          const int64_t at = v * vec::kLanes;
          const vec::F xv = vec::load_n(x + r * c + at, lanes, 0.0f);
          grad_terms(mean, at, xv, grad(r, at, lanes, xv), t);
        },
        both);
  });
  if (!in_registers) {  // the same adds, each chain's vectors loaded and stored per row
    std::fill(pg_chains, pg_chains + kRowChains * c, 0.0f);
    std::fill(px_chains, px_chains + kRowChains * c, 0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      float* pg = pg_chains + (r % kRowChains) * c;
      float* px = px_chains + (r % kRowChains) * c;
      for (int64_t at = 0; at < c; at += vec::kLanes) {
        const int64_t lanes = std::min(vec::kLanes, c - at);
        const vec::F xv = vec::load_n(x + r * c + at, lanes, 0.0f);
        vec::F t[2];
        grad_terms(mean, at, xv, grad(r, at, lanes, xv), t);
        vec::store_n(pg + at, vec::load_n(pg + at, lanes, 0.0f) + t[0], lanes);
        vec::store_n(px + at, vec::load_n(px + at, lanes, 0.0f) + t[1], lanes);
      }
    }
  }
  add_chain_totals(k, c, sum_g, sum_gx);
}

// The training backward on rows. Per-channel sums of the gradient reaching the batch norm (from
// grad_of(k, i), an add_block_grad_sums gradient for the block from image i on) and of it times
// (x - mean): each block's in float (as each plane's in NCHW), merged in double. Then gx
// elementwise from g: gy, masked there when kRelu, or the gradient the sums stored.
template <bool kRelu, class BlockGrad>
void backward_rows(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* g,
                   const BlockGrad& grad_of, const float* gamma, const float* beta,
                   const float* mean, const float* var, float eps, float* gx, float* ggamma,
                   float* gbeta) {
  auto& t = scratch_for(ctx, sh.c);
  const int64_t c = sh.c;
  for (int64_t ch = 0; ch < c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  RowCoefficients k(c);
  affine_rows(k, c, mean, t.c.data(), gamma, beta);
  std::vector<double> sum_g(static_cast<size_t>(c), 0.0), sum_gx(static_cast<size_t>(c), 0.0);
  const int64_t per_block = images_per_block(sh.s);
  for (int64_t i = 0; i < sh.n; i += per_block) {
    const int64_t rows = std::min(per_block, sh.n - i) * sh.s;
    add_block_grad_sums(rows, c, k, x + i * sh.s * c, grad_of(k, i), sum_g.data(), sum_gx.data());
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    t.a[ch] = static_cast<float>(sum_g[ch]);
    t.b[ch] = static_cast<float>(sum_gx[ch]);
  }
  grad_coefficients(sh, t, ggamma, gbeta);
  elemt_rows<kRelu>(sh, k, x, g, mean, t.c.data(), gamma, t.a.data(), t.b.data(), gx);
}

// backward_rows of batch norm (+ ReLU) from gy.
template <bool kRelu>
void backward_rows(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* gy,
                   const float* gamma, const float* beta, const float* mean, const float* var,
                   float eps, float* gx, float* ggamma, float* gbeta) {
  const auto grad_of = [&](const RowCoefficients& k, int64_t i) {
    return InputGradient<kRelu>{k, gy + i * sh.s * sh.c, sh.c};
  };
  backward_rows<kRelu>(ctx, sh, x, gy, grad_of, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
}

// The batch's mean[c] and biased var[c], in either layout.
void batch_stats(HostContext& ctx, const BatchNormShape& sh, const float* x, float* mean,
                 float* var);

// [n, c, 1] (BatchNorm1d's [N, C], or 1x1 images) is [n, 1, c] byte for byte: the channels-last
// loops take it a row of channels at a time, where the planes' take it one element a plane (and
// the statistics one merge per element).
inline BatchNormShape rows_if_single(const BatchNormShape& sh) {
  return sh.s == 1 ? BatchNormShape{sh.n, sh.c, 1, true} : sh;
}

// The training forward, y = batch_norm(x) (+ residual when kResidual), then max(., 0) when kRelu.
template <bool kRelu, bool kResidual>
void forward_train(HostContext& ctx, const BatchNormShape& shape, const float* x,
                   const float* residual, const float* gamma, const float* beta, float eps,
                   float* y, float* mean, float* var) {
  const BatchNormShape sh = rows_if_single(shape);
  batch_stats(ctx, sh, x, mean, var);
  auto& t = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, t.c.data(), gamma, beta);
    apply_rows<kRelu, kResidual>(sh, k, x, y, residual);
    return;
  }
  apply_planes<kRelu, kResidual>(sh, 0, sh.n * sh.c, x, mean, t.c.data(), gamma, beta, y, residual);
}

}  // namespace dpe::host::bn
