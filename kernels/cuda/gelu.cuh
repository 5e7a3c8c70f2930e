// GELU on CUDA in its tanh form, with the host backend's formulas (kernels/host/gelu.h), in
// float32 and in bfloat16 and float16 (the host's gelu_*_lowp in kernels/host/elementwise_lowp.h):
// each 16-bit element is read as float, put through the float32 kernels' formula and rounded once
// to nearest even.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

namespace dpe::cuda {

class CudaContext;

void gelu_forward(CudaContext& ctx, const float* x, float* y, int64_t n);
// gx = gy * dy/dx at x (the forward's input).
void gelu_backward(CudaContext& ctx, const float* x, const float* gy, float* gx, int64_t n);

// The same on n contiguous values of dtype dt (bfloat16 or float16).
void gelu_forward_lowp(CudaContext& ctx, DType dt, const void* x, void* y, int64_t n);
void gelu_backward_lowp(CudaContext& ctx, DType dt, const void* x, const void* gy, void* gx,
                        int64_t n);

}  // namespace dpe::cuda
