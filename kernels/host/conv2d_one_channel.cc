#include "kernels/host/conv2d_one_channel.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512VL__)
#include <immintrin.h>
#include <omp.h>
#define DPE_CONV_ONE_CHANNEL 1
#endif

namespace dpe::host {

#if defined(DPE_CONV_ONE_CHANNEL)
namespace {

// A vector of L output channels: 16 (a zmm register) or 8 (a ymm register, with AVX-512VL's 32 of
// them: a 7x7 kernel's taps need more than 16).
template <int L>
struct Vec;
template <>
struct Vec<16> {
  using T = __m512;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float v) { return _mm512_set1_ps(v); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
};
template <>
struct Vec<8> {
  using T = __m256;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float v) { return _mm256_set1_ps(v); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
};

// Each thread's copy of an image inside its zero padding, hp x wp; wp leaves room on the right for
// the forward's last block of output pixels (computed whole, stored in part).
constexpr int64_t kPixels = 8;  // output pixels a forward block: 8 FMAs in flight a tap
struct Padded {
  int64_t hp, wp;
  std::vector<float> xp;
  explicit Padded(const Conv2dShape& s)
      : hp(s.h + 2 * s.padding),
        wp(std::max(s.w + 2 * s.padding,
                    ((s.wo + kPixels - 1) / kPixels * kPixels - 1) * s.stride + s.kw)),
        xp(static_cast<size_t>(hp * wp), 0.0f) {}
  void fill(const Conv2dShape& s, const float* image) {
    for (int64_t r = 0; r < s.h; ++r) {
      std::copy_n(image + r * s.w, s.w, xp.data() + (r + s.padding) * wp + s.padding);
    }
  }
};

// One image's output channels [o0, o0 + L) for kPixels output pixels of a row at a time: each
// tap's weight vector (wt: [tap][o]) times the tap's input under each pixel, broadcast. A pixel's
// taps are added in tap order onto its bias (or 0).
template <int L, int kKernel>
void forward_image(const Conv2dShape& s, const Padded& pad, const float* wt, const float* b,
                   int64_t o0, float* y) {
  using V = Vec<L>;
  const int64_t st = s.stride, wp = pad.wp;
  for (int64_t oy = 0; oy < s.ho; ++oy) {
    for (int64_t ox0 = 0; ox0 < s.wo; ox0 += kPixels) {
      // Every loop over the pixels unrolled, so that acc stays in registers.
      typename V::T acc[kPixels];
      const typename V::T bias = b != nullptr ? V::load(b + o0) : V::zero();
#pragma GCC unroll 8
      for (int p = 0; p < kPixels; ++p) acc[p] = bias;
      const float* base = pad.xp.data() + oy * st * wp + ox0 * st;
      for (int row = 0; row < kKernel; ++row) {
#pragma GCC unroll 7
        for (int col = 0; col < kKernel; ++col) {
          const typename V::T wv = V::load(wt + (row * kKernel + col) * s.o + o0);
          const float* at = base + row * wp + col;
#pragma GCC unroll 8
          for (int p = 0; p < kPixels; ++p) acc[p] = V::fma(V::set1(at[p * st]), wv, acc[p]);
        }
      }
      const int64_t pixels = std::min(kPixels, s.wo - ox0);
      float* out = y + (oy * s.wo + ox0) * s.o + o0;
#pragma GCC unroll 8
      for (int p = 0; p < kPixels; ++p) {
        if (p < pixels) V::store(out + p * s.o, acc[p]);
      }
    }
  }
}

template <int L, int kKernel>
void forward(const Conv2dShape& s, const float* x, const float* w, const float* b, float* y) {
  constexpr int kTaps = kKernel * kKernel;
  std::vector<float> wt(static_cast<size_t>(kTaps * s.o));
  for (int64_t oc = 0; oc < s.o; ++oc) {
    for (int t = 0; t < kTaps; ++t) wt[t * s.o + oc] = w[oc * kTaps + t];
  }
  const int64_t out_image = s.ho * s.wo * s.o;
#pragma omp parallel if (s.n > 1)
  {
    Padded pad(s);
#pragma omp for
    for (int64_t n = 0; n < s.n; ++n) {
      pad.fill(s, x + n * s.h * s.w);
      for (int64_t o0 = 0; o0 < s.o; o0 += L) {
        forward_image<L, kKernel>(s, pad, wt.data(), b, o0, y + n * out_image);
      }
    }
  }
}

// One image's contribution to the weight gradient of output channels [o0, o0 + L), taps of kernel
// rows [kRow0, kRow0 + kRows) (and the bias's where kBias): each tap's L sums, in float over the
// image's pixels, then added in double to total [kTaps + 1][L]. A 7x7 kernel's 49 taps take two
// passes over the image's gradient (28 and 21 accumulators), 3x3 and 5x5 kernels one.
template <int L, int kKernel, int kRow0, int kRows, bool kBias>
void add_image(const Conv2dShape& s, const Padded& pad, const float* gy, int64_t o0,
               double* total) {
  using V = Vec<L>;
  constexpr int kTaps = kRows * kKernel;
  typename V::T acc[kTaps + 1];
  for (auto& a : acc) a = V::zero();
  const int64_t wp = pad.wp;
  for (int64_t oy = 0; oy < s.ho; ++oy) {
    for (int64_t ox = 0; ox < s.wo; ++ox) {
      const typename V::T g = V::load(gy + (oy * s.wo + ox) * s.o + o0);
      const float* base = pad.xp.data() + (oy * s.stride + kRow0) * wp + ox * s.stride;
#pragma GCC unroll 49
      for (int t = 0; t < kTaps; ++t) {
        acc[t] = V::fma(V::set1(base[(t / kKernel) * wp + t % kKernel]), g, acc[t]);
      }
      if (kBias) acc[kTaps] = V::add(acc[kTaps], g);
    }
  }
  float sums[L];
  for (int t = 0; t < kTaps + (kBias ? 1 : 0); ++t) {
    V::store(sums, acc[t]);
    const int64_t tap = t < kTaps ? kRow0 * kKernel + t : kKernel * kKernel;
    for (int64_t lane = 0; lane < L; ++lane) total[tap * L + lane] += sums[lane];
  }
}

template <int L, int kKernel>
void add_image_taps(const Conv2dShape& s, const Padded& pad, const float* gy, int64_t o0,
                    double* total) {
  if constexpr (kKernel == 7) {
    add_image<L, 7, 0, 4, false>(s, pad, gy, o0, total);
    add_image<L, 7, 4, 3, true>(s, pad, gy, o0, total);
  } else {
    add_image<L, kKernel, 0, kKernel, true>(s, pad, gy, o0, total);
  }
}

template <int L, int kKernel>
void weight_grad(const Conv2dShape& s, const float* x, const float* gy, float* gw, float* gb) {
  constexpr int kTaps = kKernel * kKernel;
  const int64_t in_image = s.h * s.w, out_image = s.ho * s.wo * s.o;
  // Images in fixed chunks, one per thread, their sums added in chunk order: the same result for
  // a given thread count, whatever the threads' timing.
  const int chunks = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), s.n));
  const size_t per_chunk = static_cast<size_t>((kTaps + 1) * s.o);
  std::vector<double> totals(per_chunk * static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for num_threads(chunks) if (chunks > 1)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    Padded pad(s);
    double* total = totals.data() + per_chunk * static_cast<size_t>(chunk);
    for (int64_t n = s.n * chunk / chunks; n < s.n * (chunk + 1) / chunks; ++n) {
      pad.fill(s, x + n * in_image);
      for (int64_t o0 = 0; o0 < s.o; o0 += L) {
        add_image_taps<L, kKernel>(s, pad, gy + n * out_image, o0,
                                   total + o0 / L * (kTaps + 1) * L);
      }
    }
  }
  for (int64_t o0 = 0; o0 < s.o; o0 += L) {
    for (int64_t lane = 0; lane < L; ++lane) {
      const int64_t oc = o0 + lane;
      for (int t = 0; t <= kTaps; ++t) {
        double sum = 0.0;
        for (int chunk = 0; chunk < chunks; ++chunk) {
          sum += totals[per_chunk * chunk + (o0 / L * (kTaps + 1) + t) * L + lane];
        }
        if (t < kTaps) {
          gw[oc * kTaps + t] = static_cast<float>(sum);
        } else if (gb != nullptr) {
          gb[oc] = static_cast<float>(sum);
        }
      }
    }
  }
}

// Calls f(L, kKernel) (as std::integral_constants) for the shapes these kernels take: one input
// channel, channels last, a square 3x3, 5x5 or 7x7 kernel, output channels in vectors of 16 or
// just 8.
template <class F>
bool with_kernel(const Conv2dShape& s, const F& f) {
  if (!s.channels_last || s.c != 1 || s.kh != s.kw || s.n == 0) return false;
  const auto sized = [&](auto lanes) {
    switch (s.kh) {
      case 3:
        f(lanes, std::integral_constant<int, 3>{});
        return true;
      case 5:
        f(lanes, std::integral_constant<int, 5>{});
        return true;
      case 7:
        f(lanes, std::integral_constant<int, 7>{});
        return true;
      default:
        return false;
    }
  };
  if (s.o % 16 == 0) return sized(std::integral_constant<int, 16>{});
  if (s.o == 8) return sized(std::integral_constant<int, 8>{});
  return false;
}

}  // namespace
#endif

bool conv2d_one_channel_forward(const Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y) {
#if defined(DPE_CONV_ONE_CHANNEL)
  // Eight output channels only: oneDNN's first-layer kernel fills its 16-channel blocks at about
  // the peak (the ConvNet's conv1 at batch 256: 1.41 ms, here 2.03), and runs half of each empty
  // with 8 (ResNet-tiny's stem at batch 100: 0.31 ms, here 0.20).
  if (s.o != 8) return false;
  return with_kernel(s, [&](auto lanes, auto kernel) {
    forward<decltype(lanes)::value, decltype(kernel)::value>(s, x, w, b, y);
  });
#else
  return false;
#endif
}

bool conv2d_one_channel_weight_grad(const Conv2dShape& s, const float* x, const float* gy,
                                    float* gw, float* gb) {
#if defined(DPE_CONV_ONE_CHANNEL)
  return with_kernel(s, [&](auto lanes, auto kernel) {
    weight_grad<decltype(lanes)::value, decltype(kernel)::value>(s, x, gy, gw, gb);
  });
#else
  return false;
#endif
}

}  // namespace dpe::host
