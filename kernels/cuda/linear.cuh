// Fully connected layer on CUDA, as torch.nn.functional.linear: y[n, o] = x[n, i] @ w[o, i]^T
// + b[o], and its gradients. cuBLAS SGEMM on row-major data (each product computed as its
// transpose in cuBLAS's column-major view); FP32 math, no TF32.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// b may be null (no bias).
void linear_forward(CudaContext& ctx, const LinearShape& s, const float* x, const float* w,
                    const float* b, float* y);
// Any of gx [n, i], gw [o, i], gb [o] may be null: that gradient is not computed. gw and gb are
// multiplied by param_grad_scale (DDP's 1/world when they go straight into its buckets).
void linear_backward(CudaContext& ctx, const LinearShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb,
                     float param_grad_scale = 1.0f);

}  // namespace dpe::cuda
