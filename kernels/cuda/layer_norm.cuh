// Layer normalisation on CUDA over the last dim, with the host backend's semantics
// (kernels/host/layer_norm.h): one warp per row for the forward and the input gradient; the
// parameter gradients sum per-chunk partials in a workspace, then the chunks (deterministic).
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// gamma / beta may be null (1 and 0); mean / rstd [rows] are written for the backward.
void layer_norm_forward(CudaContext& ctx, const LayerNormShape& s, const float* x,
                        const float* gamma, const float* beta, float eps, float* y, float* mean,
                        float* rstd);
// ggamma / gbeta may be null (not computed).
void layer_norm_backward(CudaContext& ctx, const LayerNormShape& s, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* rstd,
                         float* gx, float* ggamma, float* gbeta);

}  // namespace dpe::cuda
