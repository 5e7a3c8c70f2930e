// 2-D convolution on CUDA (NCHW, square stride and padding, no dilation or groups), as
// torch.nn.functional.conv2d, and its gradients: cuDNN's legacy convolution API with FP32 (FMA)
// math, algorithms from the *_v7 heuristics (a universally supported one as fallback), the
// workspace from the CudaContext; the bias and its gradient with dpe's kernels.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// b may be null (no bias). n must be > 0.
void conv2d_forward(CudaContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                    const float* b, float* y);
// Any of gx, gw, gb may be null: that gradient is not computed. n must be > 0.
void conv2d_backward(CudaContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb);

}  // namespace dpe::cuda
