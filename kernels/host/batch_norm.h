// Batch normalisation on the host over (N, S) per channel, x laid out [N, C, S] (S = H*W, or 1
// for [N, C] input), as torch.nn.functional.batch_norm: the training forward (batch mean and
// biased variance), the evaluation forward, the backward, and SyncBatchNorm's elementwise steps
// (batch_norm_relu.h: the kernels fused with the ReLU after them). gamma/beta may be null
// (affine=False: 1 and 0). Plain loops: oneDNN 2.6 offers only its reference-like kernel for
// NCHW, measured 4-5x slower on the ConvNet's shapes (kernel_bench).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// Writes y and the batch statistics mean[c] and biased var[c].
void batch_norm_forward_train(HostContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var);
void batch_norm_forward_eval(HostContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y);
// Gradients of the training forward; ggamma / gbeta may be null (not computed).
void batch_norm_backward(HostContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta);
// y = (x - mean) * invstd * gamma + beta.
void batch_norm_elemt(HostContext& ctx, const BatchNormShape& sh, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y);
// gx = (gy - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma.
void batch_norm_backward_elemt(HostContext& ctx, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx);

}  // namespace dpe::host
