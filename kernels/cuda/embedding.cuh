// Embedding lookup on CUDA and its scatter-add gradient, with the host backend's semantics and
// messages (kernels/host/embedding.h). A bad index is flagged on the device and reported by a
// read-back that waits for the stream. The gradient accumulates with atomicAdd, so the order of
// additions for a repeated index (and the last bits of its row) may vary from run to run.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

void embedding_forward(CudaContext& ctx, const float* weight, const int64_t* index, float* y,
                       int64_t n, int64_t rows, int64_t cols);
void embedding_backward(CudaContext& ctx, const int64_t* index, const float* gy, float* gw,
                        int64_t n, int64_t rows, int64_t cols);

}  // namespace dpe::cuda
