// GELU on the host in its tanh form, as torch.nn.functional.gelu(x, approximate='tanh') (GPT-2's):
// y = x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3))), and its gradient.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

void gelu_forward(HostContext& ctx, const float* x, float* y, int64_t n);
// gx = gy * dy/dx at x (the forward's input).
void gelu_backward(HostContext& ctx, const float* x, const float* gy, float* gx, int64_t n);

}  // namespace dpe::host
