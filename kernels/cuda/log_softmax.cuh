// Row-wise log-softmax on CUDA over x [rows, cols] and its gradient, with the host backend's
// semantics (kernels/host/log_softmax.h): max-shifted, the max taken with fmaxf. One block a row.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

void log_softmax_forward(CudaContext& ctx, const float* x, float* y, int64_t rows, int64_t cols);
// gx = gy - exp(y) * sum(gy) per row.
void log_softmax_backward(CudaContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols);

}  // namespace dpe::cuda
