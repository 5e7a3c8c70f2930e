// 2-D max pooling on CUDA (NCHW, square window, ceil_mode=False) with the host backend's
// semantics (kernels/host/max_pool2d.h): padding counts as -inf, a NaN wins, ties keep the first
// position in row-major order, and the saved index of each output is the flat position h * W + w
// of its maximum in its (n, c) input plane (int64).
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

void max_pool2d_forward(CudaContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices);
// gx (all of it) = scatter-add of gy at the saved indices (atomicAdd: overlapping windows add in
// an unspecified order).
void max_pool2d_backward(CudaContext& ctx, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx);

}  // namespace dpe::cuda
