// Convolutions with one input channel (a first layer on grey images: the ConvNet's conv1 and
// ResNet-tiny's 7x7 stem on Fashion-MNIST), channels last, with AVX-512. oneDNN 2.6 has no weight
// gradient shaped for one input channel (about half the SGEMM peak) and its forward fills blocks
// of 16 output channels, half empty with 8 (docs/performance.md); these run at 70-100% of the
// peak, the padding's taps included.
// - forward: for kPixels output pixels of a row at a time, each tap's vector of output channels'
//   weights times the tap's input under each pixel, broadcast;
// - weight gradient: for each output pixel, one vector of output channels' gradients times each
//   tap's input, broadcast, into one accumulator a tap (a 7x7 kernel's in two passes).
// Output channels in vectors of 16, or one of 8 (ymm). Internal to conv2d.cc.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::host {

// Computes y [n, ho, wo, o] from x [n, h, w, 1], w [o, 1, kh, kw] and b [o] (null: none) and
// returns true; false, with nothing written, when the shape is not one it takes: one input
// channel, channels last, 8 output channels (oneDNN does 16 and more better), a 3x3, 5x5 or 7x7
// kernel, and a build for AVX-512 (-march; a portable build always returns false).
bool conv2d_one_channel_forward(const Conv2dShape& s, const float* x, const float* w,
                                const float* b, float* y);

// Computes gw [o, 1, kh, kw] and, when gb is not null, gb [o] from x [n, h, w, 1] and gy
// [n, ho, wo, o], and returns true; false, with nothing written, on the shapes the forward
// refuses, except that it takes o a multiple of 16 too.
bool conv2d_one_channel_weight_grad(const Conv2dShape& s, const float* x, const float* gy,
                                    float* gw, float* gb);

}  // namespace dpe::host
