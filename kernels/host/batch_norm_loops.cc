#include "kernels/host/batch_norm_loops.h"

#include <array>
#include <vector>

namespace dpe::host::bn {

namespace {

enum : int64_t { kBnScratch = 0x626e01 };

// Chan et al.'s update: a block of `block` values with mean `block_mean` and squared deviations
// `block_sq` merged into a running count, mean and squared deviations (double).
inline void merge_block(double count, double block, float block_mean, float block_sq,
                        double& mean_so_far, double& m2) {
  const double total = count + block;
  const double delta = static_cast<double>(block_mean) - mean_so_far;
  mean_so_far += delta * (block / total);
  m2 += static_cast<double>(block_sq) + delta * delta * (count * block / total);
}

// Per channel, the total of the kRowChains partial sums in `chains` (kRowChains runs of c).
static_assert(kRowChains == 4, "add_chains adds four chains pairwise");
inline void add_chains(const float* chains, int64_t c, float* total) {
  for (int64_t ch = 0; ch < c; ++ch) {
    total[ch] = (chains[ch] + chains[c + ch]) + (chains[2 * c + ch] + chains[3 * c + ch]);
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

}  // namespace

ChannelScratch& scratch_for(HostContext& ctx, int64_t channels) {
  return ctx.cached<ChannelScratch>(CacheKey(kBnScratch, {channels}),
                                    [&] { return std::make_unique<ChannelScratch>(channels); });
}

void grad_coefficients(const BatchNormShape& sh, ChannelScratch& t, float* ggamma, float* gbeta) {
  const float inv_m = 1.0f / static_cast<float>(sh.n * sh.s);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    if (ggamma != nullptr) ggamma[ch] = t.b[ch] * t.c[ch];
    if (gbeta != nullptr) gbeta[ch] = t.a[ch];
    t.a[ch] *= inv_m;  // mean of g
    t.b[ch] *= inv_m;  // mean of g * (x - mean)
  }
}

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

void add_chain_totals(RowCoefficients& k, int64_t c, double* sum_g, double* sum_gx) {
  float* total = k.total.data();
  add_chains(k.part_g.data(), c, total);
  for (int64_t ch = 0; ch < c; ++ch) sum_g[ch] += total[ch];
  add_chains(k.part_gx.data(), c, total);
  for (int64_t ch = 0; ch < c; ++ch) sum_gx[ch] += total[ch];
}

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

}  // namespace dpe::host::bn
