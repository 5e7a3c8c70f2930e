// A max pooling window's winner, as every host pooling kernel (max_pool2d.cc, NCHW, and
// max_pool2d_channels_last.cc) finds and keeps it: torch's rule for the running maximum, what an
// output's saved index holds of it, and where a window code points. Internal to the kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host::max_pool {

// v replaces the running maximum when larger, or NaN (torch's rule: a NaN propagates).
inline void take(float v, int64_t i, float& best, int64_t& best_i) {
  if (v > best || std::isnan(v)) {
    best = v;
    best_i = i;
  }
}

#if defined(__AVX512F__)
// The same per lane: a NaN or a larger value replaces the running maximum.
inline __mmask16 wins(__m512 v, __m512 best) {
  return _mm512_cmp_ps_mask(v, best, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
}
#endif

// Every kernel keeps each output's maximum as its Index says: int64_t, its flat position in the
// plane (max_pool2d_forward's indices, torch's); uint8_t, its window code (op_params.h).
template <class Index>
constexpr bool kIsCode = std::is_same_v<Index, uint8_t>;

// What an Index keeps of element (ih, iw) of the window whose unclipped top-left is (h0, w0), in a
// plane w wide: its position ih * w + iw, or its code (ih - h0) * kernel + (iw - w0).
template <class Index>
inline int64_t saved_index(int64_t ih, int64_t iw, int64_t w, int64_t h0, int64_t w0,
                           int64_t kernel) {
  if constexpr (kIsCode<Index>) {
    return (ih - h0) * kernel + (iw - w0);
  } else {
    return ih * w + iw;
  }
}

enum : int64_t { kCodePlaces = 0x6d707002 };

// Where the backward adds an output's gradient, from its window code: corner[o] + offset[code],
// its window's unclipped top-left (flat, may be negative when padded) and the code's place
// relative to it. Kept in the HostContext, as the portable 2x2 kernel's window corners.
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
inline const CodePlaces& code_places(HostContext& ctx, const Pool2dShape& s) {
  return ctx.cached<CodePlaces>(CacheKey(kCodePlaces, {s.h, s.w, s.kernel, s.stride, s.padding}),
                                [&] { return std::make_unique<CodePlaces>(s); });
}

}  // namespace dpe::host::max_pool
