// 2-D convolution on the host (NCHW, square stride and padding, no dilation or groups), as
// torch.nn.functional.conv2d, and its gradients. oneDNN primitives on plain NCHW/OIHW memory,
// built once per shape and kept in the HostContext's cache.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// b may be null (no bias).
void conv2d_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                    const float* b, float* y);
// Any of gx, gw, gb may be null: that gradient is not computed.
void conv2d_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb);

}  // namespace dpe::host
