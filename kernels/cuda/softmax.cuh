// Softmax over the last dim on CUDA with an optional causal mask, with the host backend's
// semantics (kernels/host/softmax.h). One block a row.
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

void softmax_forward(CudaContext& ctx, const SoftmaxShape& s, const float* x, float* y);
// gx = y * (gy - sum(gy * y)) per row.
void softmax_backward(CudaContext& ctx, const float* y, const float* gy, float* gx, int64_t rows,
                      int64_t cols);

}  // namespace dpe::cuda
