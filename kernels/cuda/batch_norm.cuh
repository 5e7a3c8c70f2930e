// Batch normalisation on CUDA over (N, S) per channel, x laid out [N, C, S] (S = H*W, or 1 for
// [N, C] input), with the host backend's semantics (kernels/host/batch_norm.h): the training
// forward (batch mean and biased variance, two passes), the evaluation forward, the backward, and
// SyncBatchNorm's elementwise steps. gamma/beta may be null (affine=False: 1 and 0). dpe's own
// kernels, not cuDNN's: the contract returns the biased variance, which cuDNN does not save.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

void batch_norm_forward_train(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var);
void batch_norm_forward_eval(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y);
// ggamma / gbeta may be null (not computed).
void batch_norm_backward(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta);
// y = (x - mean) * invstd * gamma + beta.
void batch_norm_elemt(CudaContext& ctx, const BatchNormShape& sh, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y);
// gx = (gy - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma.
void batch_norm_backward_elemt(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx);

}  // namespace dpe::cuda
