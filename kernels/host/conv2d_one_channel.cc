#include "kernels/host/conv2d_one_channel.h"

#include <algorithm>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#include <omp.h>
#endif

namespace dpe::host {

#if defined(__AVX512F__)
namespace {

constexpr int64_t kBlock = 16;  // output channels a vector

// One image's contribution for output channels [o0, o0 + 16): each tap's 16 sums and the bias's,
// summed in float over the image's pixels, then added in double to total [kTaps + 1][16]. xp: the
// image inside its padding, zeros, (h + 2p) x (w + 2p), wp wide.
template <int kKernel>
void add_image(const Conv2dShape& s, const float* xp, int64_t wp, const float* gy, int64_t o0,
               double* total) {
  constexpr int kTaps = kKernel * kKernel;
  __m512 acc[kTaps + 1];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t oy = 0; oy < s.ho; ++oy) {
    for (int64_t ox = 0; ox < s.wo; ++ox) {
      const __m512 g = _mm512_loadu_ps(gy + (oy * s.wo + ox) * s.o + o0);
      const float* base = xp + oy * s.stride * wp + ox * s.stride;
#pragma GCC unroll 49
      for (int t = 0; t < kTaps; ++t) {
        acc[t] = _mm512_fmadd_ps(_mm512_set1_ps(base[(t / kKernel) * wp + t % kKernel]), g, acc[t]);
      }
      acc[kTaps] = _mm512_add_ps(acc[kTaps], g);
    }
  }
  float sums[kBlock];
  for (int t = 0; t <= kTaps; ++t) {
    _mm512_storeu_ps(sums, acc[t]);
    for (int64_t lane = 0; lane < kBlock; ++lane) total[t * kBlock + lane] += sums[lane];
  }
}

template <int kKernel>
void weight_grad(const Conv2dShape& s, const float* x, const float* gy, float* gw, float* gb) {
  constexpr int kTaps = kKernel * kKernel;
  const int64_t hp = s.h + 2 * s.padding, wp = s.w + 2 * s.padding;
  const int64_t in_image = s.h * s.w, out_image = s.ho * s.wo * s.o;
  // Images in fixed chunks, one per thread, their sums added in chunk order: the same result for
  // a given thread count, whatever the threads' timing.
  const int chunks = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), s.n));
  const size_t per_chunk = static_cast<size_t>((kTaps + 1) * s.o);
  std::vector<double> totals(per_chunk * static_cast<size_t>(chunks), 0.0);
#pragma omp parallel for num_threads(chunks) if (chunks > 1)
  for (int chunk = 0; chunk < chunks; ++chunk) {
    std::vector<float> xp(static_cast<size_t>(hp * wp), 0.0f);
    double* total = totals.data() + per_chunk * static_cast<size_t>(chunk);
    for (int64_t n = s.n * chunk / chunks; n < s.n * (chunk + 1) / chunks; ++n) {
      for (int64_t r = 0; r < s.h; ++r) {
        std::copy_n(x + n * in_image + r * s.w, s.w, xp.data() + (r + s.padding) * wp + s.padding);
      }
      for (int64_t o0 = 0; o0 < s.o; o0 += kBlock) {
        add_image<kKernel>(s, xp.data(), wp, gy + n * out_image, o0,
                           total + o0 / kBlock * (kTaps + 1) * kBlock);
      }
    }
  }
  for (int64_t o0 = 0; o0 < s.o; o0 += kBlock) {
    for (int64_t lane = 0; lane < kBlock; ++lane) {
      const int64_t oc = o0 + lane;
      for (int t = 0; t <= kTaps; ++t) {
        double sum = 0.0;
        for (int chunk = 0; chunk < chunks; ++chunk) {
          sum += totals[per_chunk * chunk + (o0 / kBlock * (kTaps + 1) + t) * kBlock + lane];
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

}  // namespace
#endif

bool conv2d_one_channel_weight_grad(const Conv2dShape& s, const float* x, const float* gy,
                                    float* gw, float* gb) {
#if defined(__AVX512F__)
  if (!s.channels_last || s.c != 1 || s.o % kBlock != 0 || s.kh != s.kw || s.n == 0) return false;
  if (s.kh == 5) {
    weight_grad<5>(s, x, gy, gw, gb);
    return true;
  }
  if (s.kh == 3) {
    weight_grad<3>(s, x, gy, gw, gb);
    return true;
  }
#endif
  return false;
}

}  // namespace dpe::host
