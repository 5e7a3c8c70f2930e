// Max pooling's channels-last kernels on the host ([N, H, W, C]: a window's elements are runs of
// C floats, taken a vector of channels at a time), forward and backward, and the fused op's batch
// norm + ReLU made as a window is loaded. Internal to the kernels: max_pool2d.cc picks among them.
#pragma once

#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "kernels/host/max_pool2d_winner.h"
#include "kernels/op_params.h"

namespace dpe::host::max_pool {

// Any window, the running maximum and its saved index in registers (int32 lanes: the caller
// checks that a plane's positions fit).
template <class Index>
void pool_nhwc(const Pool2dShape& s, const float* x, float* y, Index* indices);
// Any window, a channel at a time: planes whose positions do not fit int32.
template <class Index>
void pool_nhwc_wide(const Pool2dShape& s, const float* x, float* y, Index* indices);
// gx (all of it) = scatter-add of gy at the saved positions, or at the places the codes name.
void pool_nhwc_backward_positions(const Pool2dShape& s, const float* gy, const int64_t* indices,
                                  float* gx);
void pool_nhwc_backward_codes(const Pool2dShape& s, const float* gy, const uint8_t* codes,
                              const CodePlaces& places, float* gx);

#if defined(__AVX512F__)
// A window's element as pool_nhwc_2x2 and pool_nhwc_windows take it: the input itself, or
// relu(x * scale + shift) of its channel, batch norm + ReLU's output made in registers for the
// fused op, evaluated as batch_norm_loops.h's loops evaluate it (the product rounded, then the
// sum: the files that instantiate these are compiled without contraction; -0 and NaN pass the
// ReLU as they do there).
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

// 2x2 windows at stride 2 without padding (the ConvNet's), 16 channels at a time; its backward
// writes each input element once.
template <class Load = Plain, class Index = int64_t>
void pool_nhwc_2x2(const Pool2dShape& s, const float* x, float* y, Index* indices,
                   const Load& load = Load{});
template <class Index>
void pool_nhwc_2x2_backward(const Pool2dShape& s, const float* gy, const Index* indices, float* gx);

#if defined(__AVX512BW__) && defined(__AVX512VL__)
#define DPE_POOL_NHWC_WINDOWS 1
// Any window with a masked last vector, positions in int32 lanes (as pool_nhwc), its elements
// loaded through Load.
template <class Load, class Index>
void pool_nhwc_windows(const Pool2dShape& s, const float* x, float* y, Index* indices,
                       const Load& load);
// Any window over 8 channels, two neighbouring windows a vector.
template <class Index>
void pool_nhwc_pairs8(const Pool2dShape& s, const float* x, float* y, Index* indices);
#endif
#endif

}  // namespace dpe::host::max_pool
