#include "kernels/host/max_pool2d.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

namespace {

// v replaces the running maximum when larger, or NaN (torch's rule: a NaN propagates).
inline void take(float v, int64_t i, float& best, int64_t& best_i) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_i = i;
  }
}

// The ConvNet's 2x2 windows with stride 2 and no padding: always in bounds, no clamping.
void pool_2x2(const Pool2dShape& s, const float* in, float* out, int64_t* idx) {
  for (int64_t oh = 0; oh < s.ho; ++oh) {
    const int64_t r0 = 2 * oh * s.w, r1 = r0 + s.w;
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const int64_t c = 2 * ow;
      float best = in[r0 + c];
      int64_t best_i = r0 + c;
      take(in[r0 + c + 1], r0 + c + 1, best, best_i);
      take(in[r1 + c], r1 + c, best, best_i);
      take(in[r1 + c + 1], r1 + c + 1, best, best_i);
      out[oh * s.wo + ow] = best;
      idx[oh * s.wo + ow] = best_i;
    }
  }
}

void pool_general(const Pool2dShape& s, const float* in, float* out, int64_t* idx) {
  for (int64_t oh = 0; oh < s.ho; ++oh) {
    const int64_t h0 = oh * s.stride - s.padding;
    const int64_t hs = std::max<int64_t>(h0, 0), he = std::min(h0 + s.kernel, s.h);
    for (int64_t ow = 0; ow < s.wo; ++ow) {
      const int64_t w0 = ow * s.stride - s.padding;
      const int64_t ws = std::max<int64_t>(w0, 0), we = std::min(w0 + s.kernel, s.w);
      float best = -std::numeric_limits<float>::infinity();
      int64_t best_i = hs * s.w + ws;
      for (int64_t ih = hs; ih < he; ++ih) {
        for (int64_t iw = ws; iw < we; ++iw) take(in[ih * s.w + iw], ih * s.w + iw, best, best_i);
      }
      out[oh * s.wo + ow] = best;
      idx[oh * s.wo + ow] = best_i;
    }
  }
}

}  // namespace

void max_pool2d_forward(HostContext&, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices) {
  const int64_t planes = s.n * s.c;
  const bool fast = s.kernel == 2 && s.stride == 2 && s.padding == 0;
#pragma omp parallel for if (planes * s.h * s.w >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const float* in = x + p * s.h * s.w;
    float* out = y + p * s.ho * s.wo;
    int64_t* idx = indices + p * s.ho * s.wo;
    if (fast) {
      pool_2x2(s, in, out, idx);
    } else {
      pool_general(s, in, out, idx);
    }
  }
}

void max_pool2d_backward(HostContext&, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx) {
  const int64_t planes = s.n * s.c;
  const int64_t in_plane = s.h * s.w, out_plane = s.ho * s.wo;
#pragma omp parallel for if (planes * in_plane >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    float* g = gx + p * in_plane;
    std::memset(g, 0, static_cast<size_t>(in_plane) * sizeof(float));
    const float* go = gy + p * out_plane;
    const int64_t* idx = indices + p * out_plane;
    for (int64_t k = 0; k < out_plane; ++k) g[idx[k]] += go[k];
  }
}

}  // namespace dpe::host
