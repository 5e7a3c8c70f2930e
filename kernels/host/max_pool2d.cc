#include "kernels/host/max_pool2d.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

namespace {

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

// v replaces the running maximum when larger, or NaN (torch's rule: a NaN propagates).
inline void take(float v, int64_t i, float& best, int64_t& best_i) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_i = i;
  }
}

// The ConvNet's 2x2 windows with stride 2 and no padding: always in bounds, no clamping.
// Written without branches and vectorised over the whole output plane (its rows are only 7 or
// 14 wide), each window found through `corner`, the flat input position of its top-left element.
// After a ReLU half the inputs are 0, and the branch per element it replaced mispredicted so
// often that the op took 5x its memory-bound time (3.8 ms against 0.75 at batch 100).
void pool_2x2(const Pool2dShape& s, const int32_t* corner, const float* in, float* out,
              int64_t* idx) {
  const int64_t w = s.w, n = s.ho * s.wo;
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    // take()'s rule as selects: later elements win when larger or NaN, in window order.
    const int32_t c = corner[k];
    const float v0 = in[c], v1 = in[c + 1], v2 = in[c + w], v3 = in[c + w + 1];
    float best = v0;
    int64_t at = c;
    const bool t1 = (v1 > best) | (v1 != v1);
    best = t1 ? v1 : best;
    at = t1 ? c + 1 : at;
    const bool t2 = (v2 > best) | (v2 != v2);
    best = t2 ? v2 : best;
    at = t2 ? c + w : at;
    const bool t3 = (v3 > best) | (v3 != v3);
    best = t3 ? v3 : best;
    at = t3 ? c + w + 1 : at;
    out[k] = best;
    idx[k] = at;
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

void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices) {
  const int64_t planes = s.n * s.c;
  // A plane's positions must fit pool_2x2's int32 corners (16 gather lanes, not 8).
  const bool fast = s.kernel == 2 && s.stride == 2 && s.padding == 0 &&
                    s.h * s.w <= std::numeric_limits<int32_t>::max();
  const int32_t* corner =
      fast ? ctx.cached<WindowCorners>(CacheKey(kPool2x2Corners, {s.h, s.w}),
                                       [&] { return std::make_unique<WindowCorners>(s); })
                 .at.data()
           : nullptr;
#pragma omp parallel for if (planes * s.h * s.w >= kParallelGrain)
  for (int64_t p = 0; p < planes; ++p) {
    const float* in = x + p * s.h * s.w;
    float* out = y + p * s.ho * s.wo;
    int64_t* idx = indices + p * s.ho * s.wo;
    if (fast) {
      pool_2x2(s, corner, in, out, idx);
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
