// Layer normalisation on the host over the last dim, as torch.nn.functional.layer_norm(x, (D,)):
// x viewed as [rows, cols], each row normalised with its mean and biased variance, then scaled by
// gamma[cols] and shifted by beta[cols] (either may be null: 1 and 0). Plain loops, one row per
// OpenMP iteration.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// Writes y and, per row, mean[rows] and rstd[rows] = 1 / sqrt(var + eps), which backward reads.
void layer_norm_forward(HostContext& ctx, const LayerNormShape& s, const float* x,
                        const float* gamma, const float* beta, float eps, float* y, float* mean,
                        float* rstd);
// gx [rows, cols]; ggamma / gbeta [cols] may be null (not computed).
void layer_norm_backward(HostContext& ctx, const LayerNormShape& s, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* rstd,
                         float* gx, float* ggamma, float* gbeta);

}  // namespace dpe::host
