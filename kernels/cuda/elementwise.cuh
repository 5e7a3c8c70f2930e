// Elementwise ops on CUDA over n contiguous floats: add, mul, scale, relu and its gradient, with
// the host backend's semantics (kernels/host/elementwise.h). Launchers enqueue on ctx.stream().
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

void add_forward(CudaContext& ctx, const float* a, const float* b, float alpha, float* out,
                 int64_t n);  // a + alpha * b
void mul_forward(CudaContext& ctx, const float* a, const float* b, float* out, int64_t n);
void scale_forward(CudaContext& ctx, const float* a, float s, float* out, int64_t n);
void relu_forward(CudaContext& ctx, const float* x, float* y, int64_t n);  // NaN stays NaN
void relu_backward(CudaContext& ctx, const float* y, const float* gy, float* gx, int64_t n);

}  // namespace dpe::cuda
