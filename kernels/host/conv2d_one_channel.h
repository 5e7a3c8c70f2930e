// The weight gradient of a convolution with one input channel (a first layer on grey images, the
// ConvNet's conv1 on Fashion-MNIST), channels last, with AVX-512: for each output pixel, one
// vector of 16 output channels' gradients times each tap's input, broadcast, into one
// accumulator a tap (25 registers for a 5x5 kernel). oneDNN 2.6 has no kernel shaped for one
// input channel and ran this at about half the SGEMM peak (docs/performance.md); this runs at the
// FMA units' rate. Internal to conv2d.cc.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::host {

// Computes gw [o, 1, kh, kw] and, when gb is not null, gb [o] from x [n, h, w, 1] and gy
// [n, ho, wo, o] (channels last), and returns true; false, with nothing written, when the shape
// is not one it takes: one input channel, channels last, o a multiple of 16, a 3x3 or 5x5 kernel,
// and a build for AVX-512 (-march; a portable build always returns false).
bool conv2d_one_channel_weight_grad(const Conv2dShape& s, const float* x, const float* gy,
                                    float* gw, float* gb);

}  // namespace dpe::host
