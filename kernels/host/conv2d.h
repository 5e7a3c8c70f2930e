// 2-D convolution on the host (NCHW, square stride and padding, no dilation or groups), as
// torch.nn.functional.conv2d, and its gradients. oneDNN primitives on plain NCHW/OIHW memory,
// built once per shape and kept in the HostContext's cache.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

struct Conv2dShape {
  int64_t n, c, h, w;  // input
  int64_t o, kh, kw;   // weights [o, c, kh, kw]
  int64_t stride, padding;
  int64_t ho, wo;  // output [n, o, ho, wo]
};

// Fills ho/wo from the rest: floor((h + 2p - kh) / stride) + 1.
Conv2dShape conv2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, int64_t kh,
                         int64_t kw, int64_t stride, int64_t padding);

// b may be null (no bias).
void conv2d_forward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                    const float* b, float* y);
// Any of gx, gw, gb may be null: that gradient is not computed.
void conv2d_backward(HostContext& ctx, const Conv2dShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb);

}  // namespace dpe::host
