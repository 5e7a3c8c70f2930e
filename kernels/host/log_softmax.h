// Row-wise log-softmax over x [rows, cols] and its gradient, as torch.log_softmax(x, dim=1).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

void log_softmax_forward(HostContext& ctx, const float* x, float* y, int64_t rows, int64_t cols);
// gx = gy - exp(y) * sum_j gy[j], per row; y is the forward output.
void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols);

}  // namespace dpe::host
