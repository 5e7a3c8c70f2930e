// GELU on CUDA in its tanh form, with the host backend's formulas (kernels/host/gelu.h).
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

void gelu_forward(CudaContext& ctx, const float* x, float* y, int64_t n);
// gx = gy * dy/dx at x (the forward's input).
void gelu_backward(CudaContext& ctx, const float* x, const float* gy, float* gx, int64_t n);

}  // namespace dpe::cuda
