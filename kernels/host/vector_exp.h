// exp over a register of floats at a time, inlined into the loops that need it, so that a softmax
// row's exponentials live in registers instead of a scratch that a library call reads and writes.
//
// The function is Cephes' expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts, so r is
// exact), exp(r) by a degree-5 polynomial, 2^n put into the exponent bits; within about 1 ulp of
// exp on [-87.3, 88.3]. Below ln(FLT_MIN) it gives exactly 0 (so exp(-inf) = 0, as a masked
// softmax entry needs), above 88.37 +inf (a little early: exp overflows at 88.72; the softmax
// callers pass x - max <= 0), and NaN for NaN.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace dpe::host::vec {

// A vector is one register, so that no function's ABI changes with the target: 16 lanes with
// AVX-512, 8 with AVX, 4 with SSE.
#if defined(__AVX512F__)
constexpr int64_t kLanes = 16;
#elif defined(__AVX__)
constexpr int64_t kLanes = 8;
#else
constexpr int64_t kLanes = 4;
#endif
typedef float F __attribute__((vector_size(kLanes * sizeof(float))));
typedef int32_t I __attribute__((vector_size(kLanes * sizeof(int32_t))));

inline F splat(float v) { return F{} + v; }

inline F load(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

inline void store(float* p, F v) { std::memcpy(p, &v, sizeof(v)); }

// Lanes [0, n) of p (n < kLanes), the others `fill`; and its store. Masked moves where AVX-512
// has them: a softmax over the attention's short causal rows is mostly tails.
#if defined(__AVX512F__)
inline __mmask16 first_lanes(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

inline F load_first(const float* p, int64_t n, float fill) {
  return (F)_mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(n), p);
}

inline void store_first(float* p, F v, int64_t n) {
  _mm512_mask_storeu_ps(p, first_lanes(n), (__m512)v);
}
#else
inline F load_first(const float* p, int64_t n, float fill) {
  float buf[kLanes];
  for (int64_t k = 0; k < kLanes; ++k) buf[k] = k < n ? p[k] : fill;
  return load(buf);
}

inline void store_first(float* p, F v, int64_t n) {
  float buf[kLanes];
  store(buf, v);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
}
#endif

// p's first `lanes` floats (1 to kLanes), the others `fill`; and its store: whole vectors and the
// last, partial one of a loop over vectors alike.
inline F load_n(const float* p, int64_t lanes, float fill) {
  return lanes == kLanes ? load(p) : load_first(p, lanes, fill);
}

inline void store_n(float* p, F v, int64_t lanes) {
  if (lanes == kLanes) {
    store(p, v);
  } else {
    store_first(p, v, lanes);
  }
}

inline F exp(F x) {
  const F lo = splat(-87.3365478515625f);  // ln(FLT_MIN): below it, 0
  const F hi = splat(88.3762626647949f);   // Cephes' MAXLOGF: above it, +inf
  const F c = x < lo ? lo : (x > hi ? hi : x);
  // n = round(c / ln2): adding 1.5 * 2^23 leaves the integer in the float's low bits.
  const F magic = splat(12582912.0f);
  const F n = (c * splat(1.44269504088896341f) + magic) - magic;
  F r = c - n * splat(0.693359375f);  // ln2's first 9 bits: n * this is exact
  r = r - n * splat(-2.12194440e-4f);
  F p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  const I bits = (__builtin_convertvector(n, I) + 127) << 23;
  F y = p * (F)bits;  // a cast between vectors of one size keeps the bits
  y = x < lo ? splat(0.0f) : y;
  y = x > hi ? splat(__builtin_inff()) : y;
  return x != x ? x : y;
}

// The lanes folded in halves with op (a vector op at each step where AVX-512 has 16).
template <typename Op>
inline float fold(F v, Op op) {
#if defined(__AVX512F__)
  typedef float F8 __attribute__((vector_size(8 * sizeof(float))));
  typedef float F4 __attribute__((vector_size(4 * sizeof(float))));
  const F8 a = op(F8(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7)),
                  F8(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15)));
  const F4 b = op(F4(__builtin_shufflevector(a, a, 0, 1, 2, 3)),
                  F4(__builtin_shufflevector(a, a, 4, 5, 6, 7)));
  const F4 c = op(b, F4(__builtin_shufflevector(b, b, 2, 3, 0, 1)));
  const F4 d = op(c, F4(__builtin_shufflevector(c, c, 1, 0, 3, 2)));
  return d[0];
#else
  float buf[kLanes];
  store(buf, v);
  for (int64_t half = kLanes / 2; half >= 1; half /= 2) {
    for (int64_t k = 0; k < half; ++k) buf[k] = op(buf[k], buf[k + half]);
  }
  return buf[0];
#endif
}

inline float sum(F v) {
  return fold(v, [](auto a, auto b) { return a + b; });
}

// Row helpers (vector_exp.cc), over x[0, n):
// The largest entry, NaN when one is NaN (a softmax whose maximum is not finite, a NaN, +inf or
// every entry -inf, is NaN throughout, as torch's: the callers write that themselves).
float max_of(const float* x, int64_t n);
// sum_j exp(x[j] - shift). next (optional): n floats the caller reads next, fetched into the
// cache meanwhile, so that a row too large to stay cached costs one read from memory, overlapped
// with the exponentials of the row before.
float exp_sum(const float* x, int64_t n, float shift, const float* next = nullptr);
// y[j] = exp(x[j] - shift), and returns their sum.
float exp_store(const float* x, int64_t n, float shift, float* y);
// y[j] = exp(x[j] - shift) * scale.
void exp_scale(const float* x, int64_t n, float shift, float scale, float* y);

}  // namespace dpe::host::vec
