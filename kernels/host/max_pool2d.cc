#include "kernels/host/max_pool2d.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

Pool2dShape max_pool2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kernel,
                             int64_t stride, int64_t padding) {
  DPE_CHECK(kernel >= 1 && stride >= 1,
            "max_pool2d: kernel " << kernel << " and stride " << stride << " must be >= 1");
  DPE_CHECK(padding >= 0 && padding * 2 <= kernel,
            "max_pool2d: pad should be at most half of effective kernel size, but got pad = "
                << padding << " and kernel_size = " << kernel);
  const int64_t ho = (h + 2 * padding - kernel) / stride + 1;
  const int64_t wo = (w + 2 * padding - kernel) / stride + 1;
  DPE_CHECK(ho >= 1 && wo >= 1, "max_pool2d: output size " << ho << "x" << wo
                                                           << " is too small for input " << h << "x"
                                                           << w);
  return {n, c, h, w, kernel, stride, padding, ho, wo};
}

void max_pool2d_forward(HostContext&, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices) {
  const int64_t planes = s.n * s.c;
#pragma omp parallel for if (planes * s.h * s.w >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const float* in = x + p * s.h * s.w;
    float* out = y + p * s.ho * s.wo;
    int64_t* idx = indices + p * s.ho * s.wo;
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      const int64_t h0 = oh * s.stride - s.padding;
      const int64_t hs = h0 < 0 ? 0 : h0;
      const int64_t he = h0 + s.kernel > s.h ? s.h : h0 + s.kernel;
      for (int64_t ow = 0; ow < s.wo; ++ow) {
        const int64_t w0 = ow * s.stride - s.padding;
        const int64_t ws = w0 < 0 ? 0 : w0;
        const int64_t we = w0 + s.kernel > s.w ? s.w : w0 + s.kernel;
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_i = hs * s.w + ws;
        for (int64_t ih = hs; ih < he; ++ih) {
          for (int64_t iw = ws; iw < we; ++iw) {
            const float v = in[ih * s.w + iw];
            if (v > best || std::isnan(v)) {
              best = v;
              best_i = ih * s.w + iw;
              if (std::isnan(v)) goto done;
            }
          }
        }
      done:
        out[oh * s.wo + ow] = best;
        idx[oh * s.wo + ow] = best_i;
      }
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
