#include "kernels/host/max_pool2d.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host {

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

// pool_2x2's window corners for an input plane's size, kept in the HostContext: a call neither
// rebuilds nor allocates them.
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

// v replaces the running maximum when larger, or NaN (torch's rule: a NaN propagates).
inline void take(float v, int64_t i, float& best, int64_t& best_i) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_i = i;
  }
}

// Every kernel keeps each output's maximum as its Index says: int64_t, its flat position in the
// plane, ih * W + iw (max_pool2d_forward's indices, torch's); uint8_t, its window code
// (op_params.h), (ih - h0) * kernel + (iw - w0) for the window whose unclipped top-left is (h0,
// w0).
inline int64_t position(const int64_t*, int64_t ih, int64_t iw, int64_t w, int64_t, int64_t,
                        int64_t) {
  return ih * w + iw;
}
inline int64_t position(const uint8_t*, int64_t ih, int64_t iw, int64_t, int64_t h0, int64_t w0,
                        int64_t kernel) {
  return (ih - h0) * kernel + (iw - w0);
}
template <class Index>
constexpr bool kIsCode = std::is_same_v<Index, uint8_t>;

enum : int64_t { kCodePlaces = 0x6d707002 };

// Where the backward adds an output's gradient, from its window code: corner[o] + offset[code],
// its window's unclipped top-left (flat, may be negative when padded) and the code's place
// relative to it. Kept in the HostContext, as the portable kernel's window corners.
struct CodePlaces : HostContext::CacheEntry {
  std::vector<int64_t> corner;
  int64_t offset[kMaxWindowCodeKernel * kMaxWindowCodeKernel];
  explicit CodePlaces(const Pool2dShape& s) : corner(static_cast<size_t>(s.ho * s.wo)) {
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      for (int64_t ow = 0; ow < s.wo; ++ow) {
        corner[oh * s.wo + ow] = (oh * s.stride - s.padding) * s.w + ow * s.stride - s.padding;
      }
    }
    for (int64_t c = 0; c < s.kernel * s.kernel; ++c) offset[c] = c / s.kernel * s.w + c % s.kernel;
  }
};
// The kernel size was checked by the entry points that take codes (max_pool2d_forward and
// max_pool2d_backward with uint8_t).
const CodePlaces& code_places(HostContext& ctx, const Pool2dShape& s) {
  return ctx.cached<CodePlaces>(CacheKey(kCodePlaces, {s.h, s.w, s.kernel, s.stride, s.padding}),
                                [&] { return std::make_unique<CodePlaces>(s); });
}

// The ConvNet's 2x2 windows with stride 2 and no padding: always in bounds, no clamping.
// The versions below keep take()'s rule as selects, with no branch per element: after a ReLU
// half the inputs are 0, and a branch per element mispredicts so often that the op takes 5x its
// memory-bound time. Later elements of a window win when larger or NaN, in window order.
#if defined(__AVX512F__)
// A NaN or a larger value replaces the running maximum.
inline __mmask16 wins(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}

// Outputs 16 at a time from one pair of input rows, or, where a row has at most 8 outputs (the
// ConvNet's second pooling: 7), from two: lanes [0, wo) from rows 2oh and 2oh + 1, lanes
// [wo, 2wo) from the next pair, which starts 2w floats further on. Each row's even and odd
// columns are taken apart with one two-source permute each. Faster here than gathering each
// window (AMD's gathers are slow): the ConvNet's poolings at batch 256 take 0.78 and 0.41 ms
// against 2.1 and 0.68 (tools/kernel_bench).
template <class Index>
void pool_2x2(HostContext&, const Pool2dShape& s, const float* x, float* y, Index* indices) {
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
void pool_2x2(HostContext&, const Pool2dShape& s, const float* x, float* y, Index* indices) {
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
void pool_2x2(HostContext& ctx, const Pool2dShape& s, const float* x, float* y, Index* indices) {
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
      int64_t best_i = position(idx, hs, ws, s.w, h0, w0, s.kernel);
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) {
          take(in[ih * s.w + iw], position(idx, ih, iw, s.w, h0, w0, s.kernel), best, best_i);
        }
      }
      out[oh * s.wo + ow] = best;
      idx[oh * s.wo + ow] = static_cast<Index>(best_i);
    }
  }
}

// Calls f(n, hs, he, ws, we, h0, w0, o) for every output o (r * wo + ow, r = n * ho + oh) of a
// pooling: image n, its window's rows [hs, he) and columns [ws, we), clipped to the plane, and its
// unclipped top-left (h0, w0); rows of outputs in parallel.
template <class F>
void for_each_window(const Pool2dShape& s, const F& f) {
#pragma omp parallel for if (s.n * s.c * s.h * s.w >= kParallelGrain)
  for (int64_t r = 0; r < s.n * s.ho; ++r) {
    const int64_t n = r / s.ho, oh = r % s.ho;
    const int64_t h0 = oh * s.stride - s.padding;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + s.kernel, s.h);
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const int64_t w0 = ow * s.stride - s.padding;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + s.kernel, s.w);
      f(n, hs, he, ws, we, h0, w0, r * s.wo + ow);
    }
  }
}

// Channels last: each window's elements are C contiguous floats, so the maximum runs across the
// channels a vector at a time, with take()'s rule per lane (later elements win when larger or
// NaN). The running maximum and its position (int32 lanes: the caller checks that a plane's
// positions fit) stay in registers while the window is walked and are stored once, widened to
// int64 (or narrowed to window codes): kept in y and the indices, each element of the window cost
// a load and a store of both.
template <class Index>
void pool_nhwc(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  typedef Index Positions __attribute__((vector_size(vec::kLanes * sizeof(Index))));
  const int64_t c = s.c;
  const float lowest = -std::numeric_limits<float>::infinity();
  for_each_window(s, [&](int64_t n, int64_t hs, int64_t he, int64_t ws, int64_t we, int64_t h0,
                         int64_t w0, int64_t o) {
    const auto at_lanes = [&](int64_t ih, int64_t iw) {
      return vec::I{} + static_cast<int32_t>(position(indices, ih, iw, s.w, h0, w0, s.kernel));
    };
    for (int64_t k = 0; k < c; k += vec::kLanes) {
      const int64_t lanes = std::min(vec::kLanes, c - k);
      vec::F best = vec::splat(lowest);
      vec::I at = at_lanes(hs, ws);
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) {
          const vec::F v = vec::load_n(x + ((n * s.h + ih) * s.w + iw) * c + k, lanes, lowest);
          const vec::I wins = (v > best) | (v != v);
          best = wins ? v : best;
          at = wins ? at_lanes(ih, iw) : at;
        }
      }
      vec::store_n(y + o * c + k, best, lanes);
      const Positions out = __builtin_convertvector(at, Positions);
      std::memcpy(indices + o * c + k, &out, static_cast<size_t>(lanes) * sizeof(Index));
    }
  });
}

// pool_nhwc for planes whose positions do not fit int32: a channel at a time, take() per element.
// (tests/kernels/host builds a copy with a small limit, to run it.)
#ifndef DPE_POOL_MAX_POSITIONS
#define DPE_POOL_MAX_POSITIONS INT32_MAX
#endif
constexpr int64_t kMaxPositions = DPE_POOL_MAX_POSITIONS;
template <class Index>
void pool_nhwc_wide(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  const int64_t c = s.c;
  for_each_window(s, [&](int64_t n, int64_t hs, int64_t he, int64_t ws, int64_t we, int64_t h0,
                         int64_t w0, int64_t o) {
    for (int64_t k = 0; k < c; ++k) {
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = position(indices, hs, ws, s.w, h0, w0, s.kernel);
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) {
          take(x[((n * s.h + ih) * s.w + iw) * c + k],
               position(indices, ih, iw, s.w, h0, w0, s.kernel), best, at);
        }
      }
      y[o * c + k] = best;
      indices[o * c + k] = static_cast<Index>(at);
    }
  });
}

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

#if defined(__AVX512F__)
// Channels last, 2x2 windows with stride 2 and no padding (the ConvNet's): a window is four runs
// of C floats (a, b on the top row, d, e below), taken 16 channels at a time in registers with
// take()'s rule and written once, with none of pool_nhwc's clipping or position arithmetic per
// element; the fused op's forward also makes batch norm + ReLU's values here (AffineRelu).
struct NhwcWindow {
  const float *a, *b, *d, *e;
  int64_t pos, w;  // a's flat position in the plane, the plane's width
};

// A window's element as the pooling takes it: the input itself, or relu(x * scale + shift) of
// its channel, batch norm + ReLU's output made in registers for the fused op, evaluated as
// batch_norm.cc's loops evaluate it (the product rounded, then the sum: this file is compiled
// without contraction; -0 and NaN pass the ReLU as they do there).
// The masked forms load lanes m of channels [k, k + 16) (the others are not used).
struct Plain {
  __m512 operator()(const float* p, int64_t) const { return _mm512_loadu_ps(p); }
  __m512 operator()(const float* p, int64_t, __mmask16 m) const {
    return _mm512_maskz_loadu_ps(m, p);
  }
  float operator()(float v, int64_t) const { return v; }
};
struct AffineRelu {
  const float *scale, *shift;
  __m512 operator()(const float* p, int64_t k) const { return (*this)(p, k, 0xffff); }
  __m512 operator()(const float* p, int64_t k, __mmask16 m) const {
    const __m512 v = _mm512_add_ps(
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, p), _mm512_maskz_loadu_ps(m, scale + k)),
        _mm512_maskz_loadu_ps(m, shift + k));
    const __m512 zero = _mm512_setzero_ps();
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
  }
  float operator()(float x, int64_t k) const {
    const float v = x * scale[k] + shift[k];
    return v < 0.0f ? 0.0f : v;
  }
};

// Where pool_nhwc_2x2 keeps each output's maximum: its flat position in the plane (int64, as
// max_pool2d_forward returns it) or its window code (a byte, 0 to 3: a, b, d, e).
inline int64_t winner(const NhwcWindow& q, int j, const int64_t*) {
  return q.pos + (j & 1) + (j >> 1) * q.w;
}
inline int64_t winner(const NhwcWindow&, int j, const uint8_t*) { return j; }

// Lanes won by elements 1, 2 and 3 of the window (a later win overrides an earlier one): the
// winners of 16 channels from k on, written to at + k.
inline void put_winners(const NhwcWindow& q, __mmask16 w1, __mmask16 w2, __mmask16 w3, int64_t* at,
                        int64_t k) {
  const __m512i p0 = _mm512_set1_epi64(q.pos), p1 = _mm512_set1_epi64(q.pos + 1),
                p2 = _mm512_set1_epi64(q.pos + q.w), p3 = _mm512_set1_epi64(q.pos + q.w + 1);
  for (int half = 0; half < 2; ++half) {
    const int shift = 8 * half;
    __m512i i = _mm512_mask_mov_epi64(p0, static_cast<__mmask8>(w1 >> shift), p1);
    i = _mm512_mask_mov_epi64(i, static_cast<__mmask8>(w2 >> shift), p2);
    i = _mm512_mask_mov_epi64(i, static_cast<__mmask8>(w3 >> shift), p3);
    _mm512_storeu_si512(at + k + shift, i);
  }
}
inline void put_winners(const NhwcWindow&, __mmask16 w1, __mmask16 w2, __mmask16 w3, uint8_t* at,
                        int64_t k) {
  __m512i i = _mm512_maskz_mov_epi32(w1, _mm512_set1_epi32(1));
  i = _mm512_mask_mov_epi32(i, w2, _mm512_set1_epi32(2));
  i = _mm512_mask_mov_epi32(i, w3, _mm512_set1_epi32(3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(at + k), _mm512_cvtepi32_epi8(i));
}

// Channels [k, k + 16) of one window.
template <class Load, class Index>
inline void pool_nhwc_16(const NhwcWindow& q, int64_t k, float* out, Index* at, const Load& load) {
  __m512 best = load(q.a + k, k);
  const __m512 v1 = load(q.b + k, k), v2 = load(q.d + k, k), v3 = load(q.e + k, k);
  const __mmask16 w1 = wins(v1, best);
  best = _mm512_mask_mov_ps(best, w1, v1);
  const __mmask16 w2 = wins(v2, best);
  best = _mm512_mask_mov_ps(best, w2, v2);
  const __mmask16 w3 = wins(v3, best);
  best = _mm512_mask_mov_ps(best, w3, v3);
  _mm512_storeu_ps(out + k, best);
  put_winners(q, w1, w2, w3, at, k);
}

template <class Load = Plain, class Index = int64_t>
void pool_nhwc_2x2(const Pool2dShape& s, const float* x, float* y, Index* indices,
                   const Load& load = Load{}) {
  const int64_t c = s.c, row = s.w * c, vec_c = c / 16 * 16;
#pragma omp parallel for if (s.n * s.c * s.h * s.w >= kParallelGrain)
  for (int64_t r = 0; r < s.n * s.ho; ++r) {
    const int64_t n = r / s.ho, oh = r % s.ho;
    const float* top = x + (n * s.h + 2 * oh) * row;
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const float* a = top + 2 * ow * c;
      const NhwcWindow q{a, a + c, a + row, a + row + c, 2 * oh * s.w + 2 * ow, s.w};
      float* out = y + (r * s.wo + ow) * c;
      Index* at = indices + (r * s.wo + ow) * c;
      for (int64_t k = 0; k < vec_c; k += 16) pool_nhwc_16(q, k, out, at, load);
      for (int64_t k = vec_c; k < c; ++k) {
        float best = load(q.a[k], k);
        int64_t j = 0;
        take(load(q.b[k], k), 1, best, j);
        take(load(q.d[k], k), 2, best, j);
        take(load(q.e[k], k), 3, best, j);
        out[k] = best;
        at[k] = static_cast<Index>(winner(q, static_cast<int>(j), at));
      }
    }
  }
}

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define DPE_POOL_NHWC_WINDOWS 1
// Channels last, any window (ResNet's stem: 3x3, stride 2, padding 1), 16 channels at a time with
// a masked last vector (8 channels: ResNet-tiny's): pool_nhwc's walk of each clipped window with
// the running maximum and its position (int32 lanes: the caller checks that a plane's positions
// fit) in registers, its elements loaded through Load (the fused op's batch norm + ReLU made
// here, as pool_nhwc_2x2 makes it).
inline void put_positions(__m512i at, __mmask16 m, int64_t* out) {
  _mm512_mask_storeu_epi64(out, static_cast<__mmask8>(m),
                           _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
  _mm512_mask_storeu_epi64(out + 8, static_cast<__mmask8>(m >> 8),
                           _mm512_cvtepi32_epi64(_mm512_extracti32x8_epi32(at, 1)));
}
inline void put_positions(__m512i at, __mmask16 m, uint8_t* out) {
  _mm_mask_storeu_epi8(out, m, _mm512_cvtepi32_epi8(at));
}

template <class Load, class Index>
void pool_nhwc_windows(const Pool2dShape& s, const float* x, float* y, Index* indices,
                       const Load& load) {
  const int64_t c = s.c;
  const __m512 lowest = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for_each_window(s, [&](int64_t n, int64_t hs, int64_t he, int64_t ws, int64_t we, int64_t h0,
                         int64_t w0, int64_t o) {
    for (int64_t k = 0; k < c; k += 16) {
      const __mmask16 m = static_cast<__mmask16>(c - k >= 16 ? 0xffff : (1u << (c - k)) - 1);
      __m512 best = lowest;
      __m512i at =
          _mm512_set1_epi32(static_cast<int32_t>(position(indices, hs, ws, s.w, h0, w0, s.kernel)));
      for (int64_t ih = hs; ih < he; ++ih) {
        const float* row = x + ((n * s.h + ih) * s.w) * c + k;
        for (int64_t iw = ws; iw < we; ++iw) {
          const __m512 v = load(row + iw * c, k, m);
          const __mmask16 w = wins(v, best);
          best = _mm512_mask_mov_ps(best, w, v);
          at = _mm512_mask_mov_epi32(at, w,
                                     _mm512_set1_epi32(static_cast<int32_t>(
                                         position(indices, ih, iw, s.w, h0, w0, s.kernel))));
        }
      }
      _mm512_mask_storeu_ps(y + o * c + k, m, best);
      put_positions(at, m, indices + o * c + k);
    }
  });
}

// Eight channels (ResNet-tiny's stem): two neighbouring windows of a row in one vector, lanes
// [0, 8) the window at ow and [8, 16) the one at ow + 1, each walked over its kernel's columns with
// those off the image loaded as -inf. They never win, so each lane's position stays at its window's
// first element in the image until a larger one comes, as in pool_nhwc_windows. One window at a
// time half-filled each vector and left the walk waiting on its chain of compares: the stem's
// [256, 8, 14, 14] pooling took 0.23 ms, 0.15 so. (Two such pairs at a time ran slower.)
template <class Index>
void pool_nhwc_pairs8(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  constexpr int64_t c = 8;
  const __m256 lowest = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  // Lanes [8, 16) of an int64 position are the next window's, stride columns on; a window code is
  // the same in both.
  const __m512i half = kIsCode<Index> ? _mm512_setzero_si512()
                                      : _mm512_mask_set1_epi32(_mm512_setzero_si512(), 0xff00,
                                                               static_cast<int32_t>(s.stride));
#pragma omp parallel for if (s.n * s.c * s.h * s.w >= kParallelGrain)
  for (int64_t r = 0; r < s.n * s.ho; ++r) {
    const int64_t n = r / s.ho, oh = r % s.ho;
    const int64_t h0 = oh * s.stride - s.padding;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + s.kernel, s.h);
    for (int64_t ow = 0; ow < s.wo; ow += 2) {
      const bool pair = ow + 1 < s.wo;
      const int64_t w0 = ow * s.stride - s.padding, w1 = w0 + s.stride;
      __m512 best = _mm512_insertf32x8(_mm512_castps256_ps512(lowest), lowest, 1);
      __m512i at = _mm512_mask_set1_epi32(
          _mm512_set1_epi32(static_cast<int32_t>(
              position(indices, hs, std::max<int64_t>(w0, 0), s.w, h0, w0, s.kernel))),
          0xff00,
          static_cast<int32_t>(
              position(indices, hs, std::max<int64_t>(w1, 0), s.w, h0, w1, s.kernel)));
      for (int64_t ih = hs; ih < he; ++ih) {
        const float* row = x + (n * s.h + ih) * s.w * c;
        for (int64_t dw = 0; dw < s.kernel; ++dw) {
          const int64_t i0 = w0 + dw, i1 = w1 + dw;
          const __mmask8 in0 = i0 >= 0 && i0 < s.w ? 0xff : 0;
          const __mmask8 in1 = pair && i1 >= 0 && i1 < s.w ? 0xff : 0;
          const __m256 v0 = _mm256_mask_loadu_ps(lowest, in0, row + (in0 ? i0 : 0) * c);
          const __m256 v1 = _mm256_mask_loadu_ps(lowest, in1, row + (in1 ? i1 : 0) * c);
          const __m512 v = _mm512_insertf32x8(_mm512_castps256_ps512(v0), v1, 1);
          const __mmask16 w = wins(v, best);
          best = _mm512_mask_mov_ps(best, w, v);
          const __m512i here = _mm512_add_epi32(_mm512_set1_epi32(static_cast<int32_t>(position(
                                                    indices, ih, i0, s.w, h0, w0, s.kernel))),
                                                half);
          at = _mm512_mask_mov_epi32(at, w, here);
        }
      }
      const __mmask16 m = pair ? 0xffff : 0x00ff;
      const int64_t o = r * s.wo + ow;
      _mm512_mask_storeu_ps(y + o * c, m, best);
      put_positions(at, m, indices + o * c);
    }
  }
}
#endif

// The lanes of channels [k, k + 16) whose maximum is the window's element at flat position
// `flat`, window code `code`.
inline __mmask16 won_by(const int64_t* at, int64_t k, int64_t flat, int32_t) {
  const __m512i f = _mm512_set1_epi64(flat);
  return static_cast<__mmask16>(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(at + k), f) |
                                (_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(at + k + 8), f) << 8));
}
inline __mmask16 won_by(const uint8_t* at, int64_t k, int64_t, int32_t code) {
  const __m512i codes =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + k)));
  return _mm512_cmpeq_epi32_mask(codes, _mm512_set1_epi32(code));
}
// One channel's.
inline bool won_by_one(const int64_t* at, int64_t k, int64_t flat, int32_t) {
  return at[k] == flat;
}
inline bool won_by_one(const uint8_t* at, int64_t k, int64_t, int32_t code) {
  return at[k] == code;
}

// The backward of pool_nhwc_2x2: the windows tile the image without overlapping, so each input
// element is written once, its window's gradient where the saved index (or window code) names it
// and 0 elsewhere: no memset, no scatter. 0.0f + g, as the scatter-add onto zeros computes it (-0
// becomes +0). The indices are the forward's, inside their windows; rows and columns no window
// covers (odd H or W) get 0.
template <class Index>
void pool_nhwc_2x2_backward(const Pool2dShape& s, const float* gy, const Index* indices,
                            float* gx) {
  const int64_t c = s.c, row = s.w * c, vec_c = c / 16 * 16;
#pragma omp parallel for if (s.n * s.c * s.h * s.w >= kParallelGrain)
  for (int64_t r = 0; r < s.n * s.h; ++r) {
    const int64_t n = r / s.h, ih = r % s.h, oh = ih / 2;
    float* g = gx + r * row;
    if (oh >= s.ho) {
      std::memset(g, 0, static_cast<size_t>(row) * sizeof(float));
      continue;
    }
    const float* go = gy + (n * s.ho + oh) * s.wo * c;
    const Index* at = indices + (n * s.ho + oh) * s.wo * c;
    // This row's elements of a window: codes 0 and 1 on its top row, 2 and 3 below.
    const int32_t code = static_cast<int32_t>(2 * (ih % 2));
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const int64_t left = ih * s.w + 2 * ow;
      float* gl = g + 2 * ow * c;
      float* gr = gl + c;
      const float* gw = go + ow * c;
      const Index* aw = at + ow * c;
      for (int64_t k = 0; k < vec_c; k += 16) {
        const __mmask16 is_l = won_by(aw, k, left, code);
        const __mmask16 is_r = won_by(aw, k, left + 1, code + 1);
        const __m512 v = _mm512_add_ps(_mm512_setzero_ps(), _mm512_loadu_ps(gw + k));
        _mm512_storeu_ps(gl + k, _mm512_maskz_mov_ps(is_l, v));
        _mm512_storeu_ps(gr + k, _mm512_maskz_mov_ps(is_r, v));
      }
      for (int64_t k = vec_c; k < c; ++k) {
        gl[k] = won_by_one(aw, k, left, code) ? 0.0f + gw[k] : 0.0f;
        gr[k] = won_by_one(aw, k, left + 1, code + 1) ? 0.0f + gw[k] : 0.0f;
      }
    }
    if (2 * s.wo < s.w) {
      std::memset(g + 2 * s.wo * c, 0, static_cast<size_t>((s.w - 2 * s.wo) * c) * sizeof(float));
    }
  }
}
#endif

// Each image's gradient planes are its own: images in parallel, positions in order within one
// (the order, hence the sums where windows overlap, of the NCHW loop).
void pool_nhwc_backward(const Pool2dShape& s, const float* gy, const int64_t* indices, float* gx) {
  const int64_t c = s.c, in_image = s.h * s.w * c, out_image = s.ho * s.wo * c;
#pragma omp parallel for if (s.n * in_image >= kParallelGrain)
  for (int64_t n = 0; n < s.n; ++n) {
    float* g = gx + n * in_image;
    std::memset(g, 0, static_cast<size_t>(in_image) * sizeof(float));
    const float* go = gy + n * out_image;
    const int64_t* idx = indices + n * out_image;
    for (int64_t p = 0; p < s.ho * s.wo; ++p) {
      for (int64_t k = 0; k < c; ++k) g[idx[p * c + k] * c + k] += go[p * c + k];
    }
  }
}
void pool_nhwc_backward(const Pool2dShape& s, const float* gy, const uint8_t* codes,
                        const CodePlaces& places, float* gx) {
  const int64_t c = s.c, in_image = s.h * s.w * c, out_image = s.ho * s.wo * c;
#pragma omp parallel for if (s.n * in_image >= kParallelGrain)
  for (int64_t n = 0; n < s.n; ++n) {
    float* g = gx + n * in_image;
    std::memset(g, 0, static_cast<size_t>(in_image) * sizeof(float));
    const float* go = gy + n * out_image;
    const uint8_t* code = codes + n * out_image;
    for (int64_t p = 0; p < s.ho * s.wo; ++p) {
      const int64_t corner = places.corner[p];
      for (int64_t k = 0; k < c; ++k) {
        g[(corner + places.offset[code[p * c + k]]) * c + k] += go[p * c + k];
      }
    }
  }
}

// NCHW: each plane's gradient zeroed, then the outputs' added at their maxima in output order.
void pool_planes_backward(const Pool2dShape& s, const float* gy, const int64_t* indices,
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

void pool_planes_backward(const Pool2dShape& s, const float* gy, const uint8_t* codes,
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
  // A plane's positions must fit pool_2x2's int32 lanes (16 of them, not 8 of int64).
  if (s.kernel == 2 && s.stride == 2 && s.padding == 0 &&
      s.h * s.w <= std::numeric_limits<int32_t>::max()) {
    pool_2x2(ctx, s, x, y, indices);
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
      pool_nhwc_backward(s, gy, indices, code_places(ctx, s), gx);
    } else {
      pool_nhwc_backward(s, gy, indices, gx);
    }
    return;
  }
  if constexpr (kIsCode<Index>) {
    if (two_by_two) {
      pool_planes_backward_2x2(s, gy, indices, gx);
    } else {
      pool_planes_backward(s, gy, indices, code_places(ctx, s), gx);
    }
  } else {
    pool_planes_backward(s, gy, indices, gx);
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
