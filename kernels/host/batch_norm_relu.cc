#include "kernels/host/batch_norm_relu.h"

#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define DPE_BN_POOL_BACKWARD_IN_REGISTERS 1
#endif

#include "engine/core/error.h"
#include "kernels/host/batch_norm_loops.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/max_pool2d.h"
#include "kernels/host/reduce.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

using bn::add_block_grad_sums;
using bn::add_chain_totals;
using bn::affine_rows;
using bn::apply_planes;
using bn::apply_rows;
using bn::backward_planes;
using bn::backward_rows;
using bn::batch_stats;
using bn::chain_sums_in_registers;
using bn::channel_affine;
using bn::ChannelScratch;
using bn::elemt_factors;
using bn::elemt_planes;
using bn::elemt_rows;
using bn::elemt_value;
using bn::forward_train;
using bn::grad_coefficients;
using bn::grad_terms;
using bn::half_rows;
using bn::images_per_block;
using bn::InputGradient;
using bn::relu_masked;
using bn::relu_of_x;
using bn::ReluMasked;
using bn::RowCoefficients;
using bn::rows_if_single;
using bn::scratch_for;
using bn::tile_half;
using bn::with_row_vectors;

namespace {

enum : int64_t { kBnPoolBlock = 0x626e02, kBnPixelWindows = 0x626e03 };

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

}  // namespace

void batch_norm_relu_forward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                             const float* gamma, const float* beta, float eps, float* y,
                             float* mean, float* var) {
  forward_train<true, false>(ctx, shape, x, nullptr, gamma, beta, eps, y, mean, var);
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
  backward_planes<true>(ctx, sh, x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
}

void batch_norm_add_relu_forward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                                 const float* residual, const float* gamma, const float* beta,
                                 float eps, float* y, float* mean, float* var) {
  forward_train<true, true>(ctx, shape, x, residual, gamma, beta, eps, y, mean, var);
}

void batch_norm_add_relu_backward(HostContext& ctx, const BatchNormShape& shape, const float* x,
                                  const float* y, const float* gy, const float* gamma,
                                  const float* mean, const float* var, float eps, float* gx,
                                  float* gresidual, float* ggamma, float* gbeta) {
  const BatchNormShape sh = rows_if_single(shape);
  if (!sh.channels_last) {  // the ops' passes, without their tensors between
    relu_backward(ctx, y, gy, gresidual, sh.n * sh.c * sh.s);
    backward_planes<false>(ctx, sh, x, gresidual, gamma, nullptr, mean, var, eps, gx, ggamma,
                           gbeta);
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
