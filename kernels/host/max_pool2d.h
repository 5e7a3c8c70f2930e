// 2-D max pooling on the host (NCHW, square window, ceil_mode=False), as
// torch.nn.functional.max_pool2d: padding counts as -inf, a NaN wins, and the saved index of
// each output is the flat position h * W + w of its maximum in the input plane (int64), or, for
// the fused batch norm + ReLU + pooling, its window code (a byte, kernels/op_params.h).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices);
// The same, each maximum's place kept as its window code (op_params.h: a byte, for the fused batch
// norm + ReLU + pooling; kernel <= kMaxWindowCodeKernel).
void max_pool2d_forward(HostContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        uint8_t* codes);
// max_pool2d_forward of relu(x * scale[ch] + shift[ch]) into window codes without that tensor
// (batch norm + ReLU + pooling fused), bit for bit the pooling of what batch norm's loops write.
// Returns false, having written nothing, where it has no kernel for `s` (only channels last with
// windows apart, kernel <= stride, with AVX-512; overlapping windows would normalise each element
// in every window that holds it): the caller normalises into a tensor and pools that.
bool max_pool2d_forward_affine_relu(HostContext& ctx, const Pool2dShape& s, const float* x,
                                    const float* scale, const float* shift, float* y,
                                    uint8_t* codes);
// gx (all of it) = scatter-add of gy at the saved indices, or at the places the codes name.
void max_pool2d_backward(HostContext& ctx, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx);
void max_pool2d_backward(HostContext& ctx, const Pool2dShape& s, const float* gy,
                         const uint8_t* codes, float* gx);

}  // namespace dpe::host
