// Elementwise ops on CUDA over n contiguous bfloat16 or float16 values (dtype dt): add, mul,
// scale, relu and its gradient, the 16-bit twins of elementwise.cuh and of the host's
// kernels/host/elementwise_lowp.h. Each element is read as float, computed, and rounded once to
// nearest even; relu and its gradient compare the 16-bit words themselves, as the host's do (a NaN
// gives 0). GELU's 16-bit kernels are in gelu.cuh, beside the float32 ones whose formula they
// share. Launchers enqueue on ctx.stream().
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"

namespace dpe::cuda {

class CudaContext;

void add_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, float alpha, void* out,
              int64_t n);  // a + alpha * b
void mul_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, void* out, int64_t n);
void scale_lowp(CudaContext& ctx, DType dt, const void* a, float s, void* out, int64_t n);
void relu_forward_lowp(CudaContext& ctx, DType dt, const void* x, void* y, int64_t n);
// gx = gy where y > 0, else 0.
void relu_backward_lowp(CudaContext& ctx, DType dt, const void* y, const void* gy, void* gx,
                        int64_t n);

}  // namespace dpe::cuda
