// 2-D max pooling on the host (NCHW, square window, ceil_mode=False), as
// torch.nn.functional.max_pool2d: padding counts as -inf, a NaN wins, and the saved index of
// each output is the flat position h * W + w of its maximum in the input plane (int64).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

struct Pool2dShape {
  int64_t n, c, h, w;
  int64_t kernel, stride, padding;
  int64_t ho, wo;
};

// Fills ho/wo: floor((h + 2p - k) / stride) + 1. Throws for padding > kernel / 2, as torch does.
Pool2dShape max_pool2d_shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kernel,
                             int64_t stride, int64_t padding);

void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices);
// gx (all of it) = scatter-add of gy at the saved indices.
void max_pool2d_backward(HostContext& ctx, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx);

}  // namespace dpe::host
