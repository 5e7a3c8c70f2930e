// Elementwise host kernels over n contiguous bfloat16 or float16 values (dtype dt): add, mul,
// scale, relu and its gradient, the 16-bit twins of elementwise.h. Each element is widened to
// float32, computed, and rounded once (to nearest even), as PyTorch's CPU kernels do.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/host/host_context.h"

namespace dpe::host {

void add_lowp(HostContext& ctx, DType dt, const void* a, const void* b, float alpha, void* out,
              int64_t n);
void mul_lowp(HostContext& ctx, DType dt, const void* a, const void* b, void* out, int64_t n);
void scale_lowp(HostContext& ctx, DType dt, const void* a, float s, void* out, int64_t n);
void relu_forward_lowp(HostContext& ctx, DType dt, const void* x, void* y, int64_t n);
// gx = gy where y > 0, else 0.
void relu_backward_lowp(HostContext& ctx, DType dt, const void* y, const void* gy, void* gx,
                        int64_t n);

// GELU (tanh form) and its gradient: gelu.h's float32 kernels on widened copies, rounded once.
void gelu_forward_lowp(HostContext& ctx, DType dt, const void* x, void* y, int64_t n);
void gelu_backward_lowp(HostContext& ctx, DType dt, const void* x, const void* gy, void* gx,
                        int64_t n);

}  // namespace dpe::host
