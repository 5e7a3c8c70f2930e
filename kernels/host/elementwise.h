// Elementwise host kernels over n contiguous floats: add, mul, scale, relu and its gradient.
// Plain loops the compiler vectorises; OpenMP splits them only when n is large enough to pay.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// Below this many elements a loop runs on the calling thread alone. Name the construct the
// condition is for, `if (parallel: n >= kParallelGrain)`: a bare `if` on `parallel for simd` also
// applies to its simd part (OpenMP 5), so every loop below the grain ran scalar (5x slower).
constexpr int64_t kParallelGrain = 1 << 15;

void add_forward(HostContext& ctx, const float* a, const float* b, float alpha, float* out,
                 int64_t n);  // a + alpha * b
void mul_forward(HostContext& ctx, const float* a, const float* b, float* out, int64_t n);
void scale_forward(HostContext& ctx, const float* a, float s, float* out, int64_t n);
void relu_forward(HostContext& ctx, const float* x, float* y, int64_t n);
// gx = gy * (y > 0); y is the forward output.
void relu_backward(HostContext& ctx, const float* y, const float* gy, float* gx, int64_t n);

}  // namespace dpe::host
