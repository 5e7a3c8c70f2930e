// Fully connected layer on the host, as torch.nn.functional.linear: y[n, o] = x[n, i] @ w[o, i]^T
// + b[o], and its gradients. SGEMM through oneDNN (kernels/host/matmul.h).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// b may be null (no bias).
void linear_forward(HostContext& ctx, const LinearShape& s, const float* x, const float* w,
                    const float* b, float* y);
// Any of gx [n, i], gw [o, i], gb [o] may be null: that gradient is not computed. gw and gb are
// multiplied by param_grad_scale (DDP's 1/world when they go straight into its buckets).
void linear_backward(HostContext& ctx, const LinearShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb,
                     float param_grad_scale = 1.0f);

}  // namespace dpe::host
