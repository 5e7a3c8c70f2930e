#include "kernels/host/max_pool2d_channels_last.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels/host/elementwise.h"
#include "kernels/host/vector_exp.h"

namespace dpe::host::max_pool {

namespace {

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

#if defined(__AVX512F__)
// Channels last, 2x2 windows with stride 2 and no padding (the ConvNet's): a window is four runs
// of C floats (a, b on the top row, d, e below), taken 16 channels at a time in registers with
// take()'s rule and written once, with none of pool_nhwc's clipping or position arithmetic per
// element; the fused op's forward also makes batch norm + ReLU's values here (AffineRelu).
struct NhwcWindow {
  const float *a, *b, *d, *e;
  int64_t pos, w;  // a's flat position in the plane, the plane's width
};

// Where pool_nhwc_2x2 keeps each output's maximum as a position: element j (0 to 3: a, b, d, e)
// of the window at its flat place in the plane (int64, as max_pool2d_forward returns it); as a
// window code, it keeps j itself.
inline int64_t winner_position(const NhwcWindow& q, int j) {
  return q.pos + (j & 1) + (j >> 1) * q.w;
}

// Lanes won by elements 1, 2 and 3 of the window (a later win overrides an earlier one): the
// winners of 16 channels from k on, written to at + k as their positions (winner_position) or, in
// put_winner_codes, as their codes.
inline void put_winner_positions(const NhwcWindow& q, __mmask16 w1, __mmask16 w2, __mmask16 w3,
                                 int64_t* at, int64_t k) {
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
inline void put_winner_codes(__mmask16 w1, __mmask16 w2, __mmask16 w3, uint8_t* at, int64_t k) {
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
  if constexpr (kIsCode<Index>) {
    put_winner_codes(w1, w2, w3, at, k);
  } else {
    put_winner_positions(q, w1, w2, w3, at, k);
  }
}

#if defined(DPE_POOL_NHWC_WINDOWS)
// The lanes m of `at` (int32 lanes) stored to out as positions, widened to int64, or as codes,
// narrowed to bytes.
inline void store_positions(__m512i at, __mmask16 m, int64_t* out) {
  _mm512_mask_storeu_epi64(out, static_cast<__mmask8>(m),
                           _mm512_cvtepi32_epi64(_mm512_castsi512_si256(at)));
  _mm512_mask_storeu_epi64(out + 8, static_cast<__mmask8>(m >> 8),
                           _mm512_cvtepi32_epi64(_mm512_extracti32x8_epi32(at, 1)));
}
inline void store_codes(__m512i at, __mmask16 m, uint8_t* out) {
  _mm_mask_storeu_epi8(out, m, _mm512_cvtepi32_epi8(at));
}
#endif

// The lanes of channels [k, k + 16) whose maximum is the window's element at flat position
// `flat` (positions), or with window code `code` (codes).
inline __mmask16 lanes_at_position(const int64_t* at, int64_t k, int64_t flat) {
  const __m512i f = _mm512_set1_epi64(flat);
  return static_cast<__mmask16>(_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(at + k), f) |
                                (_mm512_cmpeq_epi64_mask(_mm512_loadu_si512(at + k + 8), f) << 8));
}
inline __mmask16 lanes_with_code(const uint8_t* at, int64_t k, int32_t code) {
  const __m512i codes =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at + k)));
  return _mm512_cmpeq_epi32_mask(codes, _mm512_set1_epi32(code));
}
#endif

}  // namespace

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
      return vec::I{} + static_cast<int32_t>(saved_index<Index>(ih, iw, s.w, h0, w0, s.kernel));
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
template <class Index>
void pool_nhwc_wide(const Pool2dShape& s, const float* x, float* y, Index* indices) {
  const int64_t c = s.c;
  for_each_window(s, [&](int64_t n, int64_t hs, int64_t he, int64_t ws, int64_t we, int64_t h0,
                         int64_t w0, int64_t o) {
    for (int64_t k = 0; k < c; ++k) {
      float best = -std::numeric_limits<float>::infinity();
      int64_t at = saved_index<Index>(hs, ws, s.w, h0, w0, s.kernel);
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) {
          take(x[((n * s.h + ih) * s.w + iw) * c + k],
               saved_index<Index>(ih, iw, s.w, h0, w0, s.kernel), best, at);
        }
      }
      y[o * c + k] = best;
      indices[o * c + k] = static_cast<Index>(at);
    }
  });
}

#if defined(__AVX512F__)
template <class Load, class Index>
void pool_nhwc_2x2(const Pool2dShape& s, const float* x, float* y, Index* indices,
                   const Load& load) {
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
        at[k] = static_cast<Index>(kIsCode<Index> ? j : winner_position(q, static_cast<int>(j)));
      }
    }
  }
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
      // What the indices hold where the left element won, and the right one: its saved index.
      const int64_t won_l = kIsCode<Index> ? code : left, won_r = won_l + 1;
      for (int64_t k = 0; k < vec_c; k += 16) {
        __mmask16 is_l, is_r;
        if constexpr (kIsCode<Index>) {
          is_l = lanes_with_code(aw, k, code);
          is_r = lanes_with_code(aw, k, code + 1);
        } else {
          is_l = lanes_at_position(aw, k, left);
          is_r = lanes_at_position(aw, k, left + 1);
        }
        const __m512 v = _mm512_add_ps(_mm512_setzero_ps(), _mm512_loadu_ps(gw + k));
        _mm512_storeu_ps(gl + k, _mm512_maskz_mov_ps(is_l, v));
        _mm512_storeu_ps(gr + k, _mm512_maskz_mov_ps(is_r, v));
      }
      for (int64_t k = vec_c; k < c; ++k) {
        gl[k] = aw[k] == won_l ? 0.0f + gw[k] : 0.0f;
        gr[k] = aw[k] == won_r ? 0.0f + gw[k] : 0.0f;
      }
    }
    if (2 * s.wo < s.w) {
      std::memset(g + 2 * s.wo * c, 0, static_cast<size_t>((s.w - 2 * s.wo) * c) * sizeof(float));
    }
  }
}

#if defined(DPE_POOL_NHWC_WINDOWS)
// Channels last, any window (ResNet's stem: 3x3, stride 2, padding 1), 16 channels at a time with
// a masked last vector (8 channels: ResNet-tiny's): pool_nhwc's walk of each clipped window with
// the running maximum and its position (int32 lanes: the caller checks that a plane's positions
// fit) in registers, its elements loaded through Load (the fused op's batch norm + ReLU made
// here, as pool_nhwc_2x2 makes it).
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
      __m512i at = _mm512_set1_epi32(
          static_cast<int32_t>(saved_index<Index>(hs, ws, s.w, h0, w0, s.kernel)));
      for (int64_t ih = hs; ih < he; ++ih) {
        const float* row = x + ((n * s.h + ih) * s.w) * c + k;
        for (int64_t iw = ws; iw < we; ++iw) {
          const __m512 v = load(row + iw * c, k, m);
          const __mmask16 w = wins(v, best);
          best = _mm512_mask_mov_ps(best, w, v);
          at = _mm512_mask_mov_epi32(at, w,
                                     _mm512_set1_epi32(static_cast<int32_t>(
                                         saved_index<Index>(ih, iw, s.w, h0, w0, s.kernel))));
        }
      }
      _mm512_mask_storeu_ps(y + o * c + k, m, best);
      if constexpr (kIsCode<Index>) {
        store_codes(at, m, indices + o * c + k);
      } else {
        store_positions(at, m, indices + o * c + k);
      }
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
      __m512i at =
          _mm512_mask_set1_epi32(_mm512_set1_epi32(static_cast<int32_t>(saved_index<Index>(
                                     hs, std::max<int64_t>(w0, 0), s.w, h0, w0, s.kernel))),
                                 0xff00,
                                 static_cast<int32_t>(saved_index<Index>(
                                     hs, std::max<int64_t>(w1, 0), s.w, h0, w1, s.kernel)));
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
          const __m512i here = _mm512_add_epi32(
              _mm512_set1_epi32(
                  static_cast<int32_t>(saved_index<Index>(ih, i0, s.w, h0, w0, s.kernel))),
              half);
          at = _mm512_mask_mov_epi32(at, w, here);
        }
      }
      const __mmask16 m = pair ? 0xffff : 0x00ff;
      const int64_t o = r * s.wo + ow;
      _mm512_mask_storeu_ps(y + o * c, m, best);
      if constexpr (kIsCode<Index>) {
        store_codes(at, m, indices + o * c);
      } else {
        store_positions(at, m, indices + o * c);
      }
    }
  }
}
#endif
#endif

// Each image's gradient planes are its own: images in parallel, positions in order within one
// (the order, hence the sums where windows overlap, of the NCHW loop).
void pool_nhwc_backward_positions(const Pool2dShape& s, const float* gy, const int64_t* indices,
                                  float* gx) {
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
void pool_nhwc_backward_codes(const Pool2dShape& s, const float* gy, const uint8_t* codes,
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

template void pool_nhwc(const Pool2dShape&, const float*, float*, int64_t*);
template void pool_nhwc(const Pool2dShape&, const float*, float*, uint8_t*);
template void pool_nhwc_wide(const Pool2dShape&, const float*, float*, int64_t*);
template void pool_nhwc_wide(const Pool2dShape&, const float*, float*, uint8_t*);
#if defined(__AVX512F__)
template void pool_nhwc_2x2(const Pool2dShape&, const float*, float*, int64_t*, const Plain&);
template void pool_nhwc_2x2(const Pool2dShape&, const float*, float*, uint8_t*, const Plain&);
template void pool_nhwc_2x2(const Pool2dShape&, const float*, float*, uint8_t*, const AffineRelu&);
template void pool_nhwc_2x2_backward(const Pool2dShape&, const float*, const int64_t*, float*);
template void pool_nhwc_2x2_backward(const Pool2dShape&, const float*, const uint8_t*, float*);
#endif
#if defined(DPE_POOL_NHWC_WINDOWS)
template void pool_nhwc_windows(const Pool2dShape&, const float*, float*, int64_t*, const Plain&);
template void pool_nhwc_windows(const Pool2dShape&, const float*, float*, uint8_t*, const Plain&);
template void pool_nhwc_windows(const Pool2dShape&, const float*, float*, uint8_t*,
                                const AffineRelu&);
template void pool_nhwc_pairs8(const Pool2dShape&, const float*, float*, int64_t*);
template void pool_nhwc_pairs8(const Pool2dShape&, const float*, float*, uint8_t*);
#endif

}  // namespace dpe::host::max_pool
