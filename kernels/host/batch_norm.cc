#include "kernels/host/batch_norm.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define DPE_BN_POOL_BACKWARD_IN_REGISTERS 1
#endif

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/max_pool2d.h"
#include "kernels/host/reduce.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

namespace {

enum : int64_t { kBnScratch = 0x626e01, kBnPoolBlock = 0x626e02, kBnPixelWindows = 0x626e03 };

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

// Sums down an image's rows (channels last) run as kRowChains interleaved partial sums per
// channel, row r into chain r % kRowChains, added pairwise at the end. Where a row is a few whole
// vectors (chain_sums_in_registers) the chains live in registers; otherwise in memory, where with
// one chain each row's add would wait on the previous row's store (store-to-load forwarding).
// With 16 channels the chains in memory still waited on it: batch norm + ReLU + pooling over
// [256, 16, 28, 28] took 1.25x (backward) to 1.45x (forward) its time with them in registers.
constexpr int64_t kRowChains = 4;

// Per channel, the total of the kRowChains partial sums in `chains` (kRowChains runs of c).
static_assert(kRowChains == 4, "add_chains adds four chains pairwise");
inline void add_chains(const float* chains, int64_t c, float* total) {
  for (int64_t ch = 0; ch < c; ++ch) {
    total[ch] = (chains[ch] + chains[c + ch]) + (chains[2 * c + ch] + chains[3 * c + ch]);
  }
}

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

// One sum's chains over `rows` rows of c channels into `chains`: vector(r, at, lanes) is the term
// of the kLanes floats from channel `at` of row r on (the first `lanes` of them x's), scalar(r, ch)
// that of one channel; in registers where the rows are whole vectors or half of one, else in
// memory.
template <class Vector, class Scalar>
void one_chain_sum(int64_t rows, int64_t c, const Vector& vector, const Scalar& scalar,
                   float* chains) {
  const bool in_registers = with_row_vectors(c, 4, [&](auto vectors) {
    chain_sums_in_registers<vectors(), 1>(
        rows, c,
        [&](int64_t r, int v, int64_t lanes, vec::F* t) {
          t[0] = vector(r, v * vec::kLanes, lanes);
        },
        &chains);
  });
  if (in_registers) return;
  std::fill(chains, chains + kRowChains * c, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* part = chains + (r % kRowChains) * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch) part[ch] += scalar(r, ch);
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

ChannelScratch& scratch_for(HostContext& ctx, int64_t channels) {
  return ctx.cached<ChannelScratch>(CacheKey(kBnScratch, {channels}),
                                    [&] { return std::make_unique<ChannelScratch>(channels); });
}

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
void grad_coefficients(const BatchNormShape& sh, ChannelScratch& t, float* ggamma, float* gbeta) {
  const float inv_m = 1.0f / static_cast<float>(sh.n * sh.s);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    if (ggamma != nullptr) ggamma[ch] = t.b[ch] * t.c[ch];
    if (gbeta != nullptr) gbeta[ch] = t.a[ch];
    t.a[ch] *= inv_m;  // mean of g
    t.b[ch] *= inv_m;  // mean of g * (x - mean)
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
int64_t images_per_block(int64_t s) { return std::max<int64_t>(1, (kBlockRows + s - 1) / s); }

// mean[c] and biased var[c]: per block of images, its mean and squared deviations per channel
// (float), merged into the running totals with Chan et al.'s update (double).
void stats_rows(HostContext& ctx, const BatchNormShape& sh, const float* x, float* mean,
                float* var) {
  auto& t = scratch_for(ctx, sh.c);
  std::vector<double> count_mean(static_cast<size_t>(sh.c), 0.0);
  std::vector<double> m2(static_cast<size_t>(sh.c), 0.0);
  float* sum = t.a.data();
  float* sq = t.b.data();
  float* chains = t.chains.data();
  const int64_t c = sh.c;
  double count = 0.0;
  const int64_t per_block = images_per_block(sh.s);
  for (int64_t i = 0; i < sh.n; i += per_block) {
    const float* img = x + i * sh.s * c;
    const int64_t rows = std::min(per_block, sh.n - i) * sh.s;
    const double block = static_cast<double>(rows);
    one_chain_sum(
        rows, c,
        [&](int64_t r, int64_t at, int64_t lanes) {
          return vec::load_n(img + r * c + at, lanes, 0.0f);
        },
        [&](int64_t r, int64_t ch) { return img[r * c + ch]; }, chains);
    add_chains(chains, c, sum);
    float* block_mean = t.c.data();
    for (int64_t ch = 0; ch < c; ++ch) block_mean[ch] = sum[ch] / static_cast<float>(rows);
    tile_half(block_mean, c);
    one_chain_sum(
        rows, c,
        [&](int64_t r, int64_t at, int64_t lanes) {
          const vec::F d = vec::load_n(img + r * c + at, lanes, 0.0f) - vec::load(block_mean + at);
          return d * d;
        },
        [&](int64_t r, int64_t ch) {
          const float d = img[r * c + ch] - block_mean[ch];
          return d * d;
        },
        chains);
    add_chains(chains, c, sq);
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
                 const float* gamma, const float* beta) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const ChannelAffine f = channel_affine(ch, mean, invstd, gamma, beta);
    k.scale[ch] = f.scale;
    k.shift[ch] = f.shift;
    k.mean[ch] = mean[ch];
  }
  tile_half(k.scale.data(), c);
  tile_half(k.shift.data(), c);
  tile_half(k.mean.data(), c);
}

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
                   const float* mean_gy_xmu) {
  for (int64_t ch = 0; ch < c; ++ch) {
    const float is = invstd[ch];
    k.proj[ch] = is * is * mean_gy_xmu[ch];
    k.factor[ch] = is * (gamma ? gamma[ch] : 1.0f);
  }
  tile_half(k.proj.data(), c);
  tile_half(k.factor.data(), c);
}

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
void add_chain_totals(RowCoefficients& k, int64_t c, double* sum_g, double* sum_gx) {
  float* total = k.total.data();
  add_chains(k.part_g.data(), c, total);
  for (int64_t ch = 0; ch < c; ++ch) sum_g[ch] += total[ch];
  add_chains(k.part_gx.data(), c, total);
  for (int64_t ch = 0; ch < c; ++ch) sum_gx[ch] += total[ch];
}

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

// The fused residual sum and ReLU's: gy where their output y > 0 (relu_backward's mask), which is
// the residual's gradient too: stored to gr as it is made.
struct OutputReluGradient {
  const float* y;
  const float* gy;
  float* gr;
  int64_t c;
  vec::F operator()(int64_t r, int64_t at, int64_t lanes, vec::F) const {
    const int64_t i = r * c + at;
    const vec::F g = relu_masked(vec::load_n(gy + i, lanes, 0.0f), vec::load_n(y + i, lanes, 0.0f));
    vec::store_n(gr + i, g, lanes);
    return g;
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
                 float* var) {
  if (sh.channels_last) {
    stats_rows(ctx, sh, x, mean, var);
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
}

// [n, c, 1] (BatchNorm1d's [N, C], or 1x1 images) is [n, 1, c] byte for byte: the channels-last
// loops take it a row of channels at a time, where the planes' take it one element a plane (and
// the statistics one merge per element).
BatchNormShape rows_if_single(const BatchNormShape& sh) {
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

}  // namespace

void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& shape, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var, bool relu) {
  if (relu) {
    forward_train<true, false>(ctx, shape, x, nullptr, gamma, beta, eps, y, mean, var);
  } else {
    forward_train<false, false>(ctx, shape, x, nullptr, gamma, beta, eps, y, mean, var);
  }
}

void batch_norm_add_relu_forward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                                 const float* residual, const float* gamma, const float* beta,
                                 float eps, float* y, float* mean, float* var) {
  forward_train<true, true>(ctx, shape, x, residual, gamma, beta, eps, y, mean, var);
}

void batch_norm_forward_eval(HostContext& ctx, const BatchNormShape& shape, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y) {
  const BatchNormShape sh = rows_if_single(shape);
  auto& scratch = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) scratch.a[ch] = 1.0f / std::sqrt(var[ch] + eps);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, scratch.a.data(), gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, 0, sh.n * sh.c, x, mean, scratch.a.data(), gamma, beta, y);
}

void batch_norm_backward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    backward_rows<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  backward<false>(ctx, sh, x, gy, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_relu_backward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                              const float* gy, const float* gamma, const float* beta,
                              const float* mean, const float* var, float eps, float* gx,
                              float* ggamma, float* gbeta) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    backward_rows<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  backward<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_add_relu_backward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                                  const float* y, const float* gy, const float* gamma,
                                  const float* mean, const float* var, float eps, float* gx,
                                  float* gresidual, float* ggamma, float* gbeta) {
  const BatchNormShape sh = rows_if_single(shape);
  if (!sh.channels_last) {  // the ops' passes, without their tensors between
    relu_backward(ctx, y, gy, gresidual, sh.n * sh.c * sh.s);
    backward<false>(ctx, sh, x, gresidual, gamma, nullptr, mean, var, eps, gx, ggamma, gbeta);
    return;
  }
  // The mask and the residual's gradient made in the sums' pass, which reads y and gy for them
  // instead of the gradient relu_backward would have written; the elementwise step reads that.
  const auto grad_of = [&](const RowCoefficients&, int64_t i) {
    const int64_t at = i * sh.s * sh.c;
    return OutputReluGradient{y + at, gy + at, gresidual + at, sh.c};
  };
  backward_rows<false>(ctx, sh, x, gresidual, grad_of, gamma, nullptr, mean, var, eps, gx, ggamma,
                       gbeta);
}

void batch_norm_apply(HostContext& ctx, const BatchNormShape& shape, const float* x,
                      const float* mean, const float* invstd, const float* gamma, const float* beta,
                      float* y) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    affine_rows(k, sh.c, mean, invstd, gamma, beta);
    apply_rows<false>(sh, k, x, y);
    return;
  }
  apply_planes<false>(sh, 0, sh.n * sh.c, x, mean, invstd, gamma, beta, y);
}

void batch_norm_backward_elemt(HostContext&, const BatchNormShape& shape, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  const BatchNormShape sh = rows_if_single(shape);
  if (sh.channels_last) {
    RowCoefficients k(sh.c);
    elemt_rows<false>(sh, k, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx);
    return;
  }
  elemt_planes<false>(sh, 0, sh.n * sh.c, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, nullptr,
                      gx);
}

namespace {

// Batch norm + ReLU + max pooling walks the batch a block at a time: a block of whole planes
// (NCHW) or images (channels last), sized to stay in the caches (about 256 KB a thread). The
// forward's full-size ReLU output lives in this scratch instead of in a tensor in memory.
struct PoolBlock : HostContext::CacheEntry {
  std::vector<float> values;           // the block's ReLU output (forward)
  std::vector<float> sums_g, sums_gx;  // per plane of the block: the backward's float sums
  PoolBlock(int64_t floats, int64_t units) : values(floats), sums_g(units), sums_gx(units) {}
};

struct Blocks {
  int64_t unit;       // floats of x per plane (NCHW) or image (channels last)
  int64_t out_unit;   // elements of the pooled output (and codes) per plane or image
  int64_t units;      // planes or images in the batch
  int64_t per_block;  // planes or images in a block
  PoolBlock* scratch;
};

Blocks blocks_for(HostContext& ctx, const BatchNormShape& sh, const Pool2dShape& pool) {
  DPE_CHECK(pool.kernel <= kMaxWindowCodeKernel,
            "batch_norm_relu_max_pool2d: no window codes for kernel " << pool.kernel);
  Blocks b;
  b.unit = sh.channels_last ? sh.s * sh.c : sh.s;
  b.out_unit = pool.ho * pool.wo * (sh.channels_last ? sh.c : 1);
  b.units = sh.channels_last ? sh.n : sh.n * sh.c;
  const int64_t target = (int64_t{1} << 16) * std::max(omp_get_max_threads(), 1);
  b.per_block = std::clamp<int64_t>(target / std::max<int64_t>(b.unit, 1), 1, b.units);
  if (sh.channels_last) {
    // Whole blocks of the backward's sums (images_per_block), as the unfused backward takes them.
    const int64_t sums = images_per_block(sh.s);
    b.per_block = std::max(sums, b.per_block / sums * sums);
  }
  b.scratch = &ctx.cached<PoolBlock>(CacheKey(kBnPoolBlock, {b.unit, b.per_block}), [&] {
    return std::make_unique<PoolBlock>(b.unit * b.per_block, b.per_block);
  });
  return b;
}

// The pooling over `count` units from unit `first` on, as max_pool2d_forward/backward take it.
Pool2dShape block_pool(const BatchNormShape& sh, Pool2dShape pool, int64_t count) {
  if (sh.channels_last) {
    pool.n = count;
  } else {
    pool.n = 1;
    pool.c = count;
  }
  return pool;
}

}  // namespace

void batch_norm_relu_max_pool_forward(HostContext& ctx, const BatchNormShape& sh,
                                      const Pool2dShape& pool, const float* x, const float* gamma,
                                      const float* beta, float eps, float* y, uint8_t* codes,
                                      float* mean, float* var) {
  const Blocks b = blocks_for(ctx, sh, pool);
  batch_stats(ctx, sh, x, mean, var);
  auto& t = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  RowCoefficients k(sh.channels_last ? sh.c : 0);
  if (sh.channels_last) {
    affine_rows(k, sh.c, mean, t.c.data(), gamma, beta);
    // The normalised values made in the pooling's registers, where it has such a kernel.
    if (max_pool2d_forward_affine_relu(ctx, pool, x, k.scale.data(), k.shift.data(), y, codes)) {
      return;
    }
  }
  float* block = b.scratch->values.data();
  for (int64_t first = 0; first < b.units; first += b.per_block) {
    const int64_t count = std::min(b.per_block, b.units - first);
    if (sh.channels_last) {
      apply_rows<true>(BatchNormShape{count, sh.c, sh.s, true}, k, x + first * b.unit, block);
    } else {
      apply_planes<true>(sh, first, count, x + first * b.unit, mean, t.c.data(), gamma, beta,
                         block);
    }
    max_pool2d_forward(ctx, block_pool(sh, pool, count), block, y + first * b.out_unit,
                       codes + first * b.out_unit);
  }
}

#if defined(DPE_BN_POOL_BACKWARD_IN_REGISTERS)
// The fused backward of a channels-last pooling whose windows lie apart (kernel <= stride: the
// ConvNet's 2x2) with half, one or two vectors of channels, without the pooling's gradient in
// memory: each pixel's is made in registers from its window's gradient and code, once for the sums
// and once for gx. x, the pooled gradient and the
// codes are read twice and gx written once, where making the pooling's gradient (in gx, or in a
// cached block) cost a full-size write and read more, or the pooling's backward run twice.

// For each pixel of a group of images (rows of the sums, in order), with windows apart (kernel <=
// stride): the window that covers it, as its index in the group's pooled output, and its place in
// that window (its code), or kNoPlace where no window covers it (edges a stride leaves out, or a
// pooling that drops the last row or column). No code is kNoPlace: kernels are below 16.
constexpr uint8_t kNoPlace = 255;
struct PixelWindows : HostContext::CacheEntry {
  std::vector<int32_t> window;
  std::vector<uint8_t> place;
  PixelWindows(const Pool2dShape& p, int64_t images) {
    // The output along an axis whose window [o * stride - padding, + kernel) holds i, or -1.
    const auto covering = [&](int64_t i, int64_t outputs) -> int64_t {
      const int64_t o = (i + p.padding) / p.stride;
      return o < outputs && i + p.padding - o * p.stride < p.kernel ? o : -1;
    };
    for (int64_t n = 0; n < images; ++n) {
      for (int64_t ih = 0; ih < p.h; ++ih) {
        for (int64_t iw = 0; iw < p.w; ++iw) {
          const int64_t oh = covering(ih, p.ho), ow = covering(iw, p.wo);
          const bool covered = oh >= 0 && ow >= 0;
          window.push_back(covered ? static_cast<int32_t>((n * p.ho + oh) * p.wo + ow) : 0);
          const int64_t code =
              ((ih + p.padding) % p.stride) * p.kernel + (iw + p.padding) % p.stride;
          place.push_back(covered ? static_cast<uint8_t>(code) : kNoPlace);
        }
      }
    }
  }
};

// Pixel r's pooling gradient over 16 channels from channel `at`, or over its 8 (c = 8): 0.0f + gy
// where its window's code names it, as the pooling's backward writes it (-0 lands as +0), else +0.
inline __m512 window_gradient_16(const PixelWindows& pw, int64_t r, int64_t at, int64_t c,
                                 const float* gy, const uint8_t* codes) {
  const int64_t o = pw.window[r] * c + at;
  const __m128i code = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + o));
  const __mmask16 hit = _mm_cmpeq_epi8_mask(code, _mm_set1_epi8(static_cast<char>(pw.place[r])));
  return _mm512_maskz_mov_ps(hit, _mm512_add_ps(_mm512_setzero_ps(), _mm512_loadu_ps(gy + o)));
}
inline __m256 window_gradient_8(const PixelWindows& pw, int64_t r, const float* gy,
                                const uint8_t* codes) {
  const int64_t o = pw.window[r] * 8;
  const __m128i code = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + o));
  const __mmask8 hit = static_cast<__mmask8>(
      _mm_cmpeq_epi8_mask(code, _mm_set1_epi8(static_cast<char>(pw.place[r]))));
  return _mm256_maskz_mov_ps(hit, _mm256_add_ps(_mm256_setzero_ps(), _mm256_loadu_ps(gy + o)));
}

// The pooling's gradient for the vector the chains take at row r and channel `at`: V whole
// vectors a row, or (V = 0) rows r and r + 1 of 8 channels (r alone where lanes is 8).
template <int V>
inline vec::F pooled_gradient(const PixelWindows& pw, int64_t r, int64_t at, int64_t lanes,
                              int64_t c, const float* gy, const uint8_t* codes) {
  if constexpr (V == 0) {
    const __m256 lo = window_gradient_8(pw, r, gy, codes);
    const __m256 hi =
        lanes == vec::kLanes ? window_gradient_8(pw, r + 1, gy, codes) : _mm256_setzero_ps();
    return (vec::F)_mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1);
  } else {
    return (vec::F)window_gradient_16(pw, r, at, c, gy, codes);
  }
}

// gx from the pooling's gradient made in registers, a group of images (of the sums) a task, its
// rows a vector at a time (two rows a vector with half a vector a row). The per-channel arrays are
// read through locals of the task: the stores (memcpy's) may alias anything they are reached
// through, so the closure's pointers were reloaded at every vector.
template <int V>
void pooled_elemt_rows(const BatchNormShape& sh, int64_t out_image, int64_t per_sum,
                       const PixelWindows& pw, const RowCoefficients& k, const float* mean_gy,
                       const float* x, const float* gy, const uint8_t* codes, float* gx) {
  constexpr int64_t kRowsAVector = V == 0 ? 2 : 1, kVectorsARow = V == 0 ? 1 : V;
  const int64_t c = sh.c, s = sh.s, in_image = s * c;
  const int64_t groups = (sh.n + per_sum - 1) / per_sum;
#pragma omp parallel for if (sh.n * in_image >= kParallelGrain)
  for (int64_t q = 0; q < groups; ++q) {
    const float *scale = k.scale.data(), *shift = k.shift.data(), *mean = k.mean.data();
    const float *proj = k.proj.data(), *factor = k.factor.data(), *mg = mean_gy;
    const int64_t i = q * per_sum, rows = std::min(per_sum, sh.n - i) * s;
    const float* xi = x + i * in_image;
    const float* gi = gy + i * out_image;
    const uint8_t* ci = codes + i * out_image;
    float* out = gx + i * in_image;
    for (int64_t r = 0; r < rows; r += kRowsAVector) {
      const int64_t lanes = V == 0 ? std::min<int64_t>(2, rows - r) * c : vec::kLanes;
      for (int64_t v = 0; v < kVectorsARow; ++v) {
        const int64_t at = v * vec::kLanes;
        const vec::F xv = vec::load_n(xi + r * c + at, lanes, 0.0f);
        const vec::F nv = xv * vec::load(scale + at) + vec::load(shift + at);
        const vec::F g = relu_masked(pooled_gradient<V>(pw, r, at, lanes, c, gi, ci), nv);
        vec::store_n(out + r * c + at,
                     elemt_value(g, xv, vec::load(mg + at), vec::load(mean + at),
                                 vec::load(proj + at), vec::load(factor + at)),
                     lanes);
      }
    }
  }
}

// Returns false, with nothing written, where the shape is not one it takes.
bool pool_backward_in_registers(HostContext& ctx, const BatchNormShape& sh, const Pool2dShape& pool,
                                const float* x, const float* gy, const uint8_t* codes,
                                const float* gamma, ChannelScratch& t, RowCoefficients& k,
                                float* gx, float* ggamma, float* gbeta) {
  static_assert(vec::kLanes == 16, "the window sums take 8 or 16 lanes");
  const int64_t c = sh.c, s = sh.s, per_sum = images_per_block(s);
  // Windows apart (each pixel in one at most). Where they overlap (ResNet's stem: 3x3, stride 2,
  // up to 4 windows a pixel) walking each pixel's windows twice was 2x slower than the pooling's
  // scatter into gx and the batch norm's two passes over it (0.52-0.58 against 0.24-0.26 ms on
  // [256, 8, 14, 14], kernel_bench --only stem_pool).
  if (!sh.channels_last || pool.kernel > pool.stride || pool.kernel * pool.kernel > kNoPlace ||
      !(half_rows(c) || (c % vec::kLanes == 0 && c / vec::kLanes <= 2))) {
    return false;
  }
  const int64_t in_image = s * c, out_image = pool.ho * pool.wo * c;
  const PixelWindows& pw = ctx.cached<PixelWindows>(
      CacheKey(kBnPixelWindows, {pool.h, pool.w, pool.kernel, pool.stride, pool.padding, per_sum}),
      [&] { return std::make_unique<PixelWindows>(pool, per_sum); });
  std::vector<double> sum_g(static_cast<size_t>(c), 0.0), sum_gx(static_cast<size_t>(c), 0.0);
  float* const both[2] = {k.part_g.data(), k.part_gx.data()};
  const float* mean = k.mean.data();
  // The sums, a group of images at a time, as add_block_grad_sums takes them.
  with_row_vectors(c, 2, [&](auto vectors) {
    for (int64_t i = 0; i < sh.n; i += per_sum) {
      const float* xi = x + i * in_image;
      const float* gi = gy + i * out_image;
      const uint8_t* ci = codes + i * out_image;
      chain_sums_in_registers<vectors(), 2>(
          std::min(per_sum, sh.n - i) * s, c,
          [&](int64_t r, int v, int64_t lanes, vec::F* terms) {
            const int64_t at = v * vec::kLanes;
            const vec::F xv = vec::load_n(xi + r * c + at, lanes, 0.0f);
            grad_terms(
                mean, at, xv,
                relu_of_x(k, at, xv, pooled_gradient<vectors()>(pw, r, at, lanes, c, gi, ci)),
                terms);
          },
          both);
      add_chain_totals(k, c, sum_g.data(), sum_gx.data());
    }
  });
  for (int64_t ch = 0; ch < c; ++ch) {
    t.a[ch] = static_cast<float>(sum_g[ch]);
    t.b[ch] = static_cast<float>(sum_gx[ch]);
  }
  grad_coefficients(sh, t, ggamma, gbeta);
  tile_half(t.a.data(), c);
  // gx, as elemt_rows<true> computes it from the pooling's gradient.
  elemt_factors(k, c, t.c.data(), gamma, t.b.data());
  with_row_vectors(c, 2, [&](auto vectors) {
    pooled_elemt_rows<vectors()>(sh, out_image, per_sum, pw, k, t.a.data(), x, gy, codes, gx);
  });
  return true;
}
#endif

void batch_norm_relu_max_pool_backward(HostContext& ctx, const BatchNormShape& sh,
                                       const Pool2dShape& pool, const float* x, const float* gy,
                                       const uint8_t* codes, const float* gamma, const float* beta,
                                       const float* mean, const float* var, float eps, float* gx,
                                       float* ggamma, float* gbeta) {
  const Blocks b = blocks_for(ctx, sh, pool);
  auto& t = scratch_for(ctx, sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) t.c[ch] = 1.0f / std::sqrt(var[ch] + eps);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    t.affine[ch] = channel_affine(ch, mean, t.c.data(), gamma, beta);
  }
  RowCoefficients k(sh.channels_last ? sh.c : 0);
  if (sh.channels_last) affine_rows(k, sh.c, mean, t.c.data(), gamma, beta);
#if defined(DPE_BN_POOL_BACKWARD_IN_REGISTERS)
  if (pool_backward_in_registers(ctx, sh, pool, x, gy, codes, gamma, t, k, gx, ggamma, gbeta)) {
    return;
  }
#endif
  // The pooling's gradient goes straight into gx, a block at a time (max_pool2d_backward itself),
  // and the block's per-channel sums are taken while it is in the caches: each channel's planes
  // (images) in batch order, their float sums added in double, as batch_norm_relu_backward adds
  // them. Then gx is computed in place from it. One pass fewer over memory than the two ops (the
  // pooling gradient is not read back for the sums), and no full-size temporary.
  std::vector<double> sum_g(static_cast<size_t>(sh.c), 0.0), sum_gx(static_cast<size_t>(sh.c), 0.0);
  float* part_g = b.scratch->sums_g.data();
  float* part_gx = b.scratch->sums_gx.data();
  for (int64_t first = 0; first < b.units; first += b.per_block) {
    const int64_t count = std::min(b.per_block, b.units - first);
    float* block = gx + first * b.unit;
    max_pool2d_backward(ctx, block_pool(sh, pool, count), gy + first * b.out_unit,
                        codes + first * b.out_unit, block);
    if (sh.channels_last) {
      const int64_t per_sum = images_per_block(sh.s);
      for (int64_t i = 0; i < count; i += per_sum) {
        const int64_t rows = std::min(per_sum, count - i) * sh.s;
        add_block_grad_sums(rows, sh.c, k, x + (first + i) * b.unit,
                            InputGradient<true>{k, block + i * b.unit, sh.c}, sum_g.data(),
                            sum_gx.data());
      }
      continue;
    }
#pragma omp parallel for if (count * sh.s >= kParallelGrain)
    for (int64_t q = 0; q < count; ++q) {
      const int64_t ch = (first + q) % sh.c;
      const std::array<float, 2> a = plane_grad_sums(x + (first + q) * sh.s, block + q * sh.s,
                                                     mean[ch], sh.s, ReluMasked{t.affine[ch]});
      part_g[q] = a[0];
      part_gx[q] = a[1];
    }
    for (int64_t q = 0; q < count; ++q) {
      const int64_t ch = (first + q) % sh.c;
      sum_g[ch] += part_g[q];
      sum_gx[ch] += part_gx[q];
    }
  }
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    t.a[ch] = static_cast<float>(sum_g[ch]);
    t.b[ch] = static_cast<float>(sum_gx[ch]);
  }
  grad_coefficients(sh, t, ggamma, gbeta);
  // Elementwise, in place: each element's gradient is read before its gx is written.
  if (sh.channels_last) {
    elemt_rows<true>(sh, k, x, gx, mean, t.c.data(), gamma, t.a.data(), t.b.data(), gx);
  } else {
    elemt_planes<true>(sh, 0, sh.n * sh.c, x, gx, mean, t.c.data(), gamma, t.a.data(), t.b.data(),
                       t.affine.data(), gx);
  }
}

}  // namespace dpe::host
