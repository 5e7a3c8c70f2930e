// Convolutions as one SGEMM where oneDNN's direct kernels leave most of their registers empty:
// they block over the output's width, which a 1- or 2-pixel row does not fill. Measured with
// kernel_bench --only resnet_conv on an AMD EPYC Zen 4, one thread. Internal to conv2d.cc.
//
// - 1x1 kernels, channels last, at most kGemmMaxOutputPixels output pixels per image (a ResNet's
//   last stages on small images: Fashion-MNIST's 28x28 reaches 2x2 and 1x1): a linear layer over
//   the pixels they read, x's pixels as rows [n * ho * wo, c] (gathered when the stride skips some
//   or the padding adds zeros, the caller's x itself otherwise) times w [o, c, 1, 1] = [o, c].
//   ResNet-tiny's on 1x1 images ran at 20-50 GFLOP/s in oneDNN and 2-3x faster so (forward and
//   both gradients); those on 2x2 images had their weight gradients 1.5-1.8x faster and their
//   forward within 7% either way.
// - Any kernel with one output pixel whose window covers the image, in either layout (ResNet-tiny's
//   last 3x3, stride 2, on 2x2 images): every input value meets exactly one weight, so it is a
//   linear layer over each image's values, x as it is [n, c * h * w] times the weights they meet,
//   and the taps on the padding drop out instead of being multiplied. That layer's forward,
//   data and weight gradients at batch 256: 0.18, 0.22 and 0.37 ms in oneDNN, 0.12, 0.10, 0.13.
//
// Other kernels larger than 1x1 stay with oneDNN: with more output pixels most taps of such small
// images are on the padding, which oneDNN skips and a product of patches would multiply (a 3x3
// with 4 output pixels on 2x2 images ran 1.5x slower as SGEMM).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

constexpr int64_t kGemmMaxOutputPixels = 4;

// Whether conv2d runs shape s this way: a 1x1 kernel, channels last, and at most
// kGemmMaxOutputPixels output pixels per image; or one output pixel whose window covers the image.
bool conv2d_as_gemm(const Conv2dShape& s);

// As conv2d_forward and conv2d_backward (kernels/host/conv2d.h), for a shape conv2d_as_gemm takes;
// the backward without the bias's gradient (conv2d.cc sums it, in double).
void conv2d_gemm_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                         const float* b, float* y);
void conv2d_gemm_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                          const float* gy, float* gx, float* gw);

}  // namespace dpe::host
