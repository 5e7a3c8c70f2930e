#include "kernels/host/max_pool2d.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/max_pool2d_channels_last.h"
#include "kernels/host/max_pool2d_winner.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

using max_pool::code_places;
using max_pool::CodePlaces;
using max_pool::kIsCode;
using max_pool::pool_nhwc;
using max_pool::pool_nhwc_backward_codes;
using max_pool::pool_nhwc_backward_positions;
using max_pool::pool_nhwc_wide;
using max_pool::saved_index;
using max_pool::take;
#if defined(__AVX512F__)
using max_pool::AffineRelu;
using max_pool::Plain;
using max_pool::pool_nhwc_2x2;
using max_pool::pool_nhwc_2x2_backward;
using max_pool::wins;
#endif
#if defined(DPE_POOL_NHWC_WINDOWS)
using max_pool::pool_nhwc_pairs8;
using max_pool::pool_nhwc_windows;
#endif

namespace {

// f(input plane, output plane, index plane) for every plane of the batch, in parallel where the op
// is large enough; the forward and the backward pass (input gradient first) share it.
template <typename In, typename Out, typename Index, typename F>
void for_each_plane(const Pool2dShape& s, In* in, Out* out, Index* indices, F f) {
  const int64_t planes = s.n * s.c, in_plane = s.h * s.w, out_plane = s.ho * s.wo;
#pragma omp parallel for if (planes * in_plane >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    f(in + p * in_plane, out + p * out_plane, indices + p * out_plane);
  }
}

#if !defined(__AVX512F__) && !defined(__AVX2__)
enum : int64_t { kPool2x2Corners = 0x6d707001 };

// pool_planes_2x2_portable's window corners for an input plane's size, kept in the HostContext: a
// call neither rebuilds nor allocates them.
struct WindowCorners : HostContext::CacheEntry {
  std::vector<int32_t> at;  // flat input position of each output's top-left element
  explicit WindowCorners(const Pool2dShape& s) : at(static_cast<size_t>(s.ho * s.wo)) {
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      for (int64_t ow = 0; ow < s.wo; ++ow) {
        at[oh * s.wo + ow] = static_cast<int32_t>(2 * oh * s.w + 2 * ow);
      }
    }
  }
};
#endif

// The ConvNet's 2x2 windows with stride 2 and no padding: always in bounds, no clamping.
// The versions below keep take()'s rule as selects, with no branch per element: after a ReLU
// half the inputs are 0, and a branch per element mispredicts so often that the op takes 5x its
// memory-bound time. Later elements of a window win when larger or NaN, in window order.
#if defined(__AVX512F__)
// Outputs 16 at a time from one pair of input rows, or, where a row has at most 8 outputs (the
// ConvNet's second pooling: 7), from two: lanes [0, wo) from rows 2oh and 2oh + 1, lanes
// [wo, 2wo) from the next pair, which starts 2w floats further on. Each row's even and odd
// columns are taken apart with one two-source permute each. Faster here than gathering each
// window (AMD's gathers are slow): the ConvNet's poolings at batch 256 take 0.78 and 0.41 ms
// against 2.1 and 0.68 (tools/kernel_bench).
template <class Index>
void pool_planes_2x2_avx512(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  const bool two_pairs = s.wo <= 8;
  const int64_t wo = s.wo, per_step = two_pairs ? 2 * wo : 16;
  // Lane j's source in the permutes (first source: 0-15, second: 16-31) and its window's
  // top-left, relative to the first window of the step.
  alignas(64) int32_t even_at[16], corner_at[16];
  for (int32_t j = 0; j < 16; ++j) {
    const bool second = two_pairs && j >= wo;
    const int32_t col = static_cast<int32_t>(second ? j - wo : j);
    even_at[j] = (second ? 16 : 0) + 2 * col;
    corner_at[j] = static_cast<int32_t>(second ? 2 * s.w : 0) + 2 * col;
  }
  const __m512i even = _mm512_load_si512(even_at), corner = _mm512_load_si512(corner_at);
  const __m512i one = _mm512_set1_epi32(1), odd = _mm512_add_epi32(even, one);
  const __m512i below = _mm512_set1_epi32(static_cast<int32_t>(s.w));
  const __m512i offset[3] = {one, below, _mm512_add_epi32(below, one)};
  auto mask = [](int64_t bits) {
    return static_cast<__mmask16>(bits >= 16 ? 0xFFFFu : (1u << std::max<int64_t>(bits, 0)) - 1);
  };
  for_each_plane(s, x, y, indices, [&](const float* in, float* out, Index* idx) {
    for (int64_t oh = 0; oh < s.ho; oh += two_pairs ? 2 : 1) {
      const float* top = in + 2 * oh * s.w;
      const float* bottom = top + s.w;
      for (int64_t ow = 0; ow < wo; ow += per_step) {
        // Outputs this step; the two sources: the row's next 16 floats and the 16 after, or the
        // two row pairs' (the second absent below the last pair).
        int64_t r;
        __mmask16 m0, m1;
        const float *t1_at, *b1_at;
        if (two_pairs) {
          const bool pair2 = oh + 1 < s.ho;
          r = pair2 ? 2 * wo : wo;
          m0 = mask(2 * wo);
          m1 = pair2 ? m0 : 0;
          t1_at = top + 2 * s.w;
          b1_at = bottom + 2 * s.w;
        } else {
          r = std::min<int64_t>(16, wo - ow);
          m0 = mask(2 * r);
          m1 = mask(2 * r - 16);
          t1_at = top + 2 * ow + 16;
          b1_at = bottom + 2 * ow + 16;
        }
        const __m512 t0 = _mm512_maskz_loadu_ps(m0, top + 2 * ow);
        const __m512 t1 = _mm512_maskz_loadu_ps(m1, t1_at);
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bottom + 2 * ow);
        const __m512 b1 = _mm512_maskz_loadu_ps(m1, b1_at);
        const __m512 v[3] = {_mm512_permutex2var_ps(t0, odd, t1),
                             _mm512_permutex2var_ps(b0, even, b1),
                             _mm512_permutex2var_ps(b0, odd, b1)};
        __m512 best = _mm512_permutex2var_ps(t0, even, t1);
        __m512i at = corner, code = _mm512_setzero_si512();
        for (int j = 0; j < 3; ++j) {
          const __mmask16 k = wins(v[j], best);
          best = _mm512_mask_blend_ps(k, best, v[j]);
          at = _mm512_mask_add_epi32(at, k, corner, offset[j]);
          code = _mm512_mask_mov_epi32(code, k, _mm512_set1_epi32(j + 1));
        }
        const __mmask16 out_mask = mask(r);
        _mm512_mask_storeu_ps(out + oh * wo + ow, out_mask, best);
        Index* at_out = idx + oh * wo + ow;
        if constexpr (kIsCode<Index>) {
          _mm512_mask_cvtepi32_storeu_epi8(at_out, out_mask, code);
        } else {
          at = _mm512_add_epi32(at, _mm512_set1_epi32(static_cast<int32_t>(2 * oh * s.w + 2 * ow)));
          _mm512_mask_storeu_epi64(at_out, static_cast<__mmask8>(out_mask),
                                   _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
          _mm512_mask_storeu_epi64(at_out + 8, static_cast<__mmask8>(out_mask >> 8),
                                   _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(at, 1)));
        }
      }
    }
  });
}
#elif defined(__AVX2__)
// Even (kOdd = false) or odd columns of the 16 floats a, b, in order: one in-lane shuffle and one
// cross-lane permute of 64-bit pairs.
template <bool kOdd>
inline __m256 columns(__m256 a, __m256 b) {
  const __m256 picked = _mm256_shuffle_ps(a, b, kOdd ? 0xDD : 0x88);  // a0 a2 b0 b2 | a4 a6 b4 b6
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(picked), 0xD8));
}

// 8 windows side by side: top and bottom point at their rows' first 16 floats, corner is the
// first window's top-left as a flat input position and w the input's width.
template <class Index>
inline void pool_8_windows(const float* top, const float* bottom, int32_t corner, int32_t w,
                           float* out, Index* at_out) {
  const __m256 t0 = _mm256_loadu_ps(top), t1 = _mm256_loadu_ps(top + 8);
  const __m256 b0 = _mm256_loadu_ps(bottom), b1 = _mm256_loadu_ps(bottom + 8);
  const __m256 v[3] = {columns<true>(t0, t1), columns<false>(b0, b1), columns<true>(b0, b1)};
  const __m256i first =
      _mm256_add_epi32(_mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14), _mm256_set1_epi32(corner));
  const __m256i at_v[3] = {_mm256_add_epi32(first, _mm256_set1_epi32(1)),
                           _mm256_add_epi32(first, _mm256_set1_epi32(w)),
                           _mm256_add_epi32(first, _mm256_set1_epi32(w + 1))};
  constexpr bool kCodes = kIsCode<Index>;
  __m256 best = columns<false>(t0, t1);
  __m256 at = kCodes ? _mm256_setzero_ps() : _mm256_castsi256_ps(first);
  for (int j = 0; j < 3; ++j) {
    // A NaN or a larger value replaces the running maximum.
    const __m256 k = _mm256_or_ps(_mm256_cmp_ps(v[j], best, _CMP_GT_OQ),
                                  _mm256_cmp_ps(v[j], v[j], _CMP_UNORD_Q));
    best = _mm256_blendv_ps(best, v[j], k);
    at = _mm256_blendv_ps(at, _mm256_castsi256_ps(kCodes ? _mm256_set1_epi32(j + 1) : at_v[j]), k);
  }
  _mm256_storeu_ps(out, best);
  const __m256i at_i = _mm256_castps_si256(at);
  if constexpr (kCodes) {
    // Eight codes to eight bytes: 32 -> 16 -> 8 bits, saturating (they are 0 to 3).
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(at_i), _mm256_extracti128_si256(at_i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(at_out), _mm_packus_epi16(words, words));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at_out),
                        _mm256_cvtepi32_epi64(_mm256_castsi256_si128(at_i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(at_out + 4),
                        _mm256_cvtepi32_epi64(_mm256_extracti128_si256(at_i, 1)));
  }
}

// Outputs 8 at a time from one pair of input rows: each row's 16 floats split into even and odd
// columns by shuffles, no gathers (AMD's are slow: the ConvNet's poolings at batch 256 took 4.2
// and 1.6 ms with gathers, tools/kernel_bench). A row's last outputs, fewer than 8, are computed
// in place where the plane has room after them, else through a copy on the stack: AVX2's masked
// stores are microcoded on AMD, and slower than the gathers.
template <class Index>
void pool_planes_2x2_avx2(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  const int64_t wo = s.wo, full = wo / 8 * 8, rest = wo - full;
  const int32_t w = static_cast<int32_t>(s.w);
  for_each_plane(s, x, y, indices, [&](const float* in, float* out, Index* idx) {
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      const float* top = in + 2 * oh * s.w;
      const float* bottom = top + s.w;
      const int32_t row_corner = static_cast<int32_t>(2 * oh * s.w);
      float* out_row = out + oh * wo;
      Index* idx_row = idx + oh * wo;
      for (int64_t ow = 0; ow < full; ow += 8) {
        pool_8_windows(top + 2 * ow, bottom + 2 * ow, row_corner + static_cast<int32_t>(2 * ow), w,
                       out_row + ow, idx_row + ow);
      }
      if (rest == 0) continue;
      // Where 16 floats of each row and 8 outputs still lie in the plane (reading on into the next
      // row, writing outputs the next rows overwrite), directly.
      if ((2 * oh + 1) * s.w + 2 * full + 16 <= s.h * s.w && oh * wo + full + 8 <= s.ho * wo) {
        pool_8_windows(top + 2 * full, bottom + 2 * full,
                       row_corner + static_cast<int32_t>(2 * full), w, out_row + full,
                       idx_row + full);
        continue;
      }
      alignas(32) float rows[32] = {}, best[8];
      alignas(32) Index at[8];
      std::memcpy(rows, top + 2 * full, static_cast<size_t>(2 * rest) * sizeof(float));
      std::memcpy(rows + 16, bottom + 2 * full, static_cast<size_t>(2 * rest) * sizeof(float));
      pool_8_windows(rows, rows + 16, row_corner + static_cast<int32_t>(2 * full), w, best, at);
      std::memcpy(out_row + full, best, static_cast<size_t>(rest) * sizeof(float));
      std::memcpy(idx_row + full, at, static_cast<size_t>(rest) * sizeof(Index));
    }
  });
}
#else
// Without AVX2: vectorised over the whole output plane (its rows are only 7 or 14 wide), each
// window found through its corner, the flat input position of its top-left element.
template <class Index>
void pool_planes_2x2_portable(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                              Index* indices) {
  const int32_t* corner =
      ctx.cached<WindowCorners>(CacheKey(kPool2x2Corners, {s.h, s.w}),
                                [&] { return std::make_unique<WindowCorners>(s); })
          .at.data();
  const int64_t w = s.w, n = s.ho * s.wo;
  // The window's elements as the Index keeps them: 0 to 3 (codes), or from its corner on.
  constexpr bool codes = kIsCode<Index>;
  const int64_t d1 = 1, d2 = codes ? 2 : w, d3 = codes ? 3 : w + 1;
  for_each_plane(s, x, y, indices, [&](const float* in, float* out, Index* idx) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) {
      const int32_t c = corner[k];
      const int64_t base = codes ? 0 : c;
      const float v0 = in[c], v1 = in[c + 1], v2 = in[c + w], v3 = in[c + w + 1];
      float best = v0;
      int64_t at = base;
      const bool t1 = (v1 > best) | (v1 != v1);
      best = t1 ? v1 : best;
      at = t1 ? base + d1 : at;
      const bool t2 = (v2 > best) | (v2 != v2);
      best = t2 ? v2 : best;
      at = t2 ? base + d2 : at;
      const bool t3 = (v3 > best) | (v3 != v3);
      best = t3 ? v3 : best;
      at = t3 ? base + d3 : at;
      out[k] = best;
      idx[k] = static_cast<Index>(at);
    }
  });
}
#endif

template <class Index>
void pool_general(const Pool2dShape& s, const float* in, float* out, Index* idx) {
  for (int64_t oh = 0; oh < s.ho; ++oh) {
    const int64_t h0 = oh * s.stride - s.padding;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + s.kernel, s.h);
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const int64_t w0 = ow * s.stride - s.padding;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + s.kernel, s.w);
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_i = saved_index<Index>(hs, ws, s.w, h0, w0, s.kernel);
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) {
          take(in[ih * s.w + iw], saved_index<Index>(ih, iw, s.w, h0, w0, s.kernel), best, best_i);
        }
      }
      out[oh * s.wo + ow] = best;
      idx[oh * s.wo + ow] = static_cast<Index>(best_i);
    }
  }
}

// Planes whose positions do not fit int32 take pool_nhwc_wide, channels last. (tests/kernels/host
// builds a copy with a small limit, to run it.)
#ifndef DPE_POOL_MAX_POSITIONS
#define DPE_POOL_MAX_POSITIONS INT32_MAX
#endif
constexpr int64_t kMaxPositions = DPE_POOL_MAX_POSITIONS;

// NCHW planes, any window, kLanes planes at a time: the block is transposed into channels last
// (kLanes channels, one vector a pixel), pooled by pool_nhwc, and its outputs transposed back.
// Within one plane a window's compares form a chain that branches on ReLU's zeros, and rows as
// short as ResNet's 7 outputs are too short to vectorise along: pool_general runs ResNet-tiny's
// stem pooling (3x3, stride 2, padding 1) 5-6x slower than this (kernel_bench --only stem_pool).
// A pixel's position and window code are the same in every channel: the indices need no change.
template <class Index>
void pool_planes_blocked(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  const int64_t planes = s.n * s.c, in_plane = s.h * s.w, out_plane = s.ho * s.wo;
  const int64_t blocks = (planes + vec::kLanes - 1) / vec::kLanes;
#pragma omp parallel if (planes * in_plane >= kParallelGrain)
  {
    std::vector<float> in, out;
    std::vector<Index> at;
#pragma omp for
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t p0 = blk * vec::kLanes, c = std::min(vec::kLanes, planes - p0);
      in.resize(static_cast<size_t>(in_plane * c));
      out.resize(static_cast<size_t>(out_plane * c));
      at.resize(static_cast<size_t>(out_plane * c));
      for (int64_t k = 0; k < c; ++k) {
        const float* plane = x + (p0 + k) * in_plane;
        for (int64_t i = 0; i < in_plane; ++i) in[i * c + k] = plane[i];
      }
      Pool2dShape block = s;
      block.n = 1;
      block.c = c;
      block.channels_last = true;
      pool_nhwc(block, in.data(), out.data(), at.data());
      for (int64_t k = 0; k < c; ++k) {
        float* plane = y + (p0 + k) * out_plane;
        Index* idx = indices + (p0 + k) * out_plane;
        for (int64_t o = 0; o < out_plane; ++o) {
          plane[o] = out[o * c + k];
          idx[o] = at[o * c + k];
        }
      }
    }
  }
}

// NCHW: each plane's gradient zeroed, then the outputs' added at their maxima in output order.
void pool_planes_backward_positions(const Pool2dShape& s, const float* gy, const int64_t* indices,
                                    float* gx) {
  const int64_t in_plane = s.h * s.w, out_plane = s.ho * s.wo;
  for_each_plane(s, gx, gy, indices, [&](float* g, const float* go, const int64_t* idx) {
    std::memset(g, 0, static_cast<size_t>(in_plane) * sizeof(float));
    for (int64_t k = 0; k < out_plane; ++k) g[idx[k]] += go[k];
  });
}
// 2x2 windows at stride 2 (the ConvNet's), from codes. Windows do not overlap, so with AVX-512
// every element is written once, 16 windows a vector, with no zeroing pass (faster than the
// scatter from int64 positions, docs/performance.md); without it, a scatter into zeros with each
// place computed rather than looked up in CodePlaces (two loads more an output).
void pool_planes_backward_2x2(const Pool2dShape& s, const float* gy, const uint8_t* codes,
                              float* gx) {
  const int64_t w = s.w;
  for_each_plane(s, gx, gy, codes, [&](float* g, const float* go, const uint8_t* code) {
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
    // Each window's four elements written once, its gradient or zero, 16 windows a vector: no
    // pass zeroing the plane first. A row or column no window covers (odd sizes) is zeroed.
    const __m512i top_lo =
        _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i top_hi = _mm512_add_epi32(top_lo, _mm512_set1_epi32(8));
    const __m512i c0 = _mm512_setzero_si512(), c1 = _mm512_set1_epi32(1);
    const __m512i c2 = _mm512_set1_epi32(2), c3 = _mm512_set1_epi32(3);
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      float* top = g + 2 * oh * w;
      float* bottom = top + w;
      const float* g_row = go + oh * s.wo;
      const uint8_t* c_row = code + oh * s.wo;
      for (int64_t ow = 0; ow < s.wo; ow += 16) {
        const int64_t n = std::min<int64_t>(16, s.wo - ow);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1);
        const __m512i c = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, c_row + ow));
        // + 0 as the sum into a zeroed plane would: a gradient of -0 lands as +0.
        const __m512 gv = _mm512_add_ps(_mm512_maskz_loadu_ps(m, g_row + ow), _mm512_setzero_ps());
        const auto pick = [&](__m512i place) {
          return _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(c, place), gv);
        };
        const __m512 g0 = pick(c0), g1 = pick(c1), g2 = pick(c2), g3 = pick(c3);
        // Outputs ow..ow+n cover input columns 2ow..2ow+2n: the first 16, then the rest.
        const __mmask16 lo = static_cast<__mmask16>(n >= 8 ? 0xffff : (1u << (2 * n)) - 1);
        const __mmask16 hi = static_cast<__mmask16>(n > 8 ? (1u << (2 * (n - 8))) - 1 : 0);
        _mm512_mask_storeu_ps(top + 2 * ow, lo, _mm512_permutex2var_ps(g0, top_lo, g1));
        _mm512_mask_storeu_ps(top + 2 * ow + 16, hi, _mm512_permutex2var_ps(g0, top_hi, g1));
        _mm512_mask_storeu_ps(bottom + 2 * ow, lo, _mm512_permutex2var_ps(g2, top_lo, g3));
        _mm512_mask_storeu_ps(bottom + 2 * ow + 16, hi, _mm512_permutex2var_ps(g2, top_hi, g3));
      }
      if (w % 2 != 0) top[w - 1] = bottom[w - 1] = 0;
    }
    if (s.h % 2 != 0) std::memset(g + (s.h - 1) * w, 0, static_cast<size_t>(w) * sizeof(float));
#else
    std::memset(g, 0, static_cast<size_t>(s.h * w) * sizeof(float));
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      float* top = g + 2 * oh * w;
      const float* g_row = go + oh * s.wo;
      const uint8_t* c_row = code + oh * s.wo;
      for (int64_t ow = 0; ow < s.wo; ++ow) {
        const int64_t c = c_row[ow];
        // Windows apart: one gradient each, + 0 as a sum into the zeros would make -0.
        top[2 * ow + (c >> 1) * w + (c & 1)] = g_row[ow] + 0.0f;
      }
    }
#endif
  });
}

void pool_planes_backward_codes(const Pool2dShape& s, const float* gy, const uint8_t* codes,
                                const CodePlaces& places, float* gx) {
  const int64_t in_plane = s.h * s.w, out_plane = s.ho * s.wo;
  const int64_t* corner = places.corner.data();
  const int64_t* offset = places.offset;
  for_each_plane(s, gx, gy, codes, [&](float* g, const float* go, const uint8_t* code) {
    std::memset(g, 0, static_cast<size_t>(in_plane) * sizeof(float));
    for (int64_t k = 0; k < out_plane; ++k) g[corner[k] + offset[code[k]]] += go[k];
  });
}

template <class Index>
void forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y, Index* indices) {
  if (s.channels_last) {
#if defined(__AVX512F__)
    if (s.kernel == 2 && s.stride == 2 && s.padding == 0) {
      pool_nhwc_2x2(s, x, y, indices);
      return;
    }
#endif
    if (s.h * s.w > kMaxPositions) {
      pool_nhwc_wide(s, x, y, indices);
      return;
    }
#if defined(DPE_POOL_NHWC_WINDOWS)
    if (s.c == 8) {
      pool_nhwc_pairs8(s, x, y, indices);
      return;
    }
    pool_nhwc_windows(s, x, y, indices, Plain{});
#else
    pool_nhwc(s, x, y, indices);
#endif
    return;
  }
  // A plane's positions must fit the 2x2 kernels' int32 lanes (16 of them, not 8 of int64).
  if (s.kernel == 2 && s.stride == 2 && s.padding == 0 &&
      s.h * s.w <= std::numeric_limits<int32_t>::max()) {
#if defined(__AVX512F__)
    pool_planes_2x2_avx512(s, x, y, indices);
#elif defined(__AVX2__)
    pool_planes_2x2_avx2(s, x, y, indices);
#else
    pool_planes_2x2_portable(ctx, s, x, y, indices);
#endif
    return;
  }
  // In blocks of planes where there are enough of them for every thread; a few large planes
  // (fewer blocks than threads) keep a thread a plane.
  const int64_t blocks = (s.n * s.c + vec::kLanes - 1) / vec::kLanes;
  if (s.h * s.w <= kMaxPositions && blocks >= omp_get_max_threads()) {
    pool_planes_blocked(s, x, y, indices);
    return;
  }
  for_each_plane(s, x, y, indices,
                 [&](const float* in, float* out, Index* idx) { pool_general(s, in, out, idx); });
}

// The 2x2 kernels where there are some, else the scatter-add per image (channels last) or plane
// (NCHW); codes elsewhere find their places through the cached CodePlaces.
template <class Index>
void backward(HostContext& ctx, const Pool2dShape& s, const float* gy, const Index* indices,
              float* gx) {
  const bool two_by_two = s.kernel == 2 && s.stride == 2 && s.padding == 0;
  if (s.channels_last) {
#if defined(__AVX512F__)
    if (two_by_two) {
      pool_nhwc_2x2_backward(s, gy, indices, gx);
      return;
    }
#endif
    if constexpr (kIsCode<Index>) {
      pool_nhwc_backward_codes(s, gy, indices, code_places(ctx, s), gx);
    } else {
      pool_nhwc_backward_positions(s, gy, indices, gx);
    }
    return;
  }
  if constexpr (kIsCode<Index>) {
    if (two_by_two) {
      pool_planes_backward_2x2(s, gy, indices, gx);
    } else {
      pool_planes_backward_codes(s, gy, indices, code_places(ctx, s), gx);
    }
  } else {
    pool_planes_backward_positions(s, gy, indices, gx);
  }
}

}  // namespace

void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices) {
  forward(ctx, s, x, y, indices);
}

void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        uint8_t* codes) {
  DPE_CHECK(s.kernel <= kMaxWindowCodeKernel,
            "max_pool2d: no window codes for kernel " << s.kernel);
  forward(ctx, s, x, y, codes);
}

bool max_pool2d_forward_affine_relu(HostContext&, const Pool2dShape& s, const float* x,
                                    const float* scale, const float* shift, float* y,
                                    uint8_t* codes) {
#if defined(__AVX512F__)
  if (s.channels_last && s.kernel == 2 && s.stride == 2 && s.padding == 0) {
    pool_nhwc_2x2(s, x, y, codes, AffineRelu{scale, shift});
    return true;
  }
#endif
#if defined(DPE_POOL_NHWC_WINDOWS)
  // Windows apart (each element in one at most): where they overlap (ResNet's stem: 3x3, stride
  // 2) the batch norm made once in memory and pooled plainly was faster than made in every window
  // (0.33 against 0.41 ms on [256, 8, 14, 14], kernel_bench --only stem_pool).
  if (s.channels_last && s.kernel <= s.stride && s.h * s.w <= kMaxPositions) {
    pool_nhwc_windows(s, x, y, codes, AffineRelu{scale, shift});
    return true;
  }
#endif
  return false;
}

void max_pool2d_backward(HostContext& ctx, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx) {
  backward(ctx, s, gy, indices, gx);
}

void max_pool2d_backward(HostContext& ctx, const Pool2dShape& s, const float* gy,
                         const uint8_t* codes, float* gx) {
  DPE_CHECK(s.kernel <= kMaxWindowCodeKernel,
            "max_pool2d: no window codes for kernel " << s.kernel);
  backward(ctx, s, gy, codes, gx);
}

}  // namespace dpe::host
