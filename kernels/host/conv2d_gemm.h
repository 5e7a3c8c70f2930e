// 1x1 convolutions as one SGEMM, for channels-last images whose output has at most
// kGemmMaxOutputPixels pixels: a ResNet's last stages on small images (Fashion-MNIST's 28x28
// reaches 2x2 and 1x1). oneDNN's direct kernels block their registers over the output's width,
// so a 1- or 2-pixel row leaves most of each block empty: ResNet-tiny's 1x1 layers on 1x1 images
// ran at 20-50 GFLOP/s in oneDNN and 2-3x faster as SGEMM (forward and both gradients), those on
// 2x2 images had their weight gradients 1.5-1.8x faster and their forward within 7% either way
// (kernel_bench --only resnet_conv, AMD EPYC Zen 4). Internal to conv2d.cc.
//
// In channels last a 1x1 convolution is a linear layer over the pixels it reads: x's pixels as
// rows [n * ho * wo, c] (gathered when the stride skips some or the padding adds zeros, the
// caller's x itself otherwise) times w [o, c, 1, 1] = [o, c]. Larger kernels stay with oneDNN:
// on such small images most of their taps are on the padding, which oneDNN skips and a product
// of patches would multiply (a 3x3 on 2x2 ran 1.5x slower as SGEMM).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

constexpr int64_t kGemmMaxOutputPixels = 4;

// Whether conv2d runs shape s this way: a 1x1 kernel, channels last, and at most
// kGemmMaxOutputPixels output pixels per image.
bool conv2d_as_gemm(const Conv2dShape& s);

// As conv2d_forward and conv2d_backward (kernels/host/conv2d.h), for a shape conv2d_as_gemm takes;
// the backward without the bias's gradient (conv2d.cc sums it, in double).
void conv2d_gemm_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                         const float* b, float* y);
void conv2d_gemm_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                          const float* gy, float* gx, float* gw);

}  // namespace dpe::host
