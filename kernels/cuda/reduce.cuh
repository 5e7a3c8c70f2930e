// Reductions on CUDA with the host backend's semantics (kernels/host/reduce.h): the sum of all
// elements, per-row argmax (first maximum; a NaN wins), the all-finite test, and SyncBatchNorm's
// per-channel sums over x laid out [N, C, S]. Accumulation is in double.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

// *out (device memory) = sum of x.
void sum_all(CudaContext& ctx, const float* x, float* out, int64_t n);
void argmax_rows(CudaContext& ctx, const float* x, int64_t* out, int64_t rows, int64_t cols);
// Waits for the compute stream: the answer is needed on the host.
bool all_finite(CudaContext& ctx, const float* x, int64_t n);
// sum[c] = sum of x over (N, S); sumsq[c] = sum of x^2.
void channel_sums(CudaContext& ctx, const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                  int64_t s);
// sum_gy[c] = sum of gy; sum_gy_xmu[c] = sum of gy * (x - mean[c]).
void channel_grad_sums(CudaContext& ctx, const float* x, const float* gy, const float* mean,
                       float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c, int64_t s);
// out[j] = scale * sum over rows of x[rows, cols] (the bias gradient of a linear layer).
void column_sums(CudaContext& ctx, const float* x, float* out, int64_t rows, int64_t cols,
                 float scale = 1.0f);

}  // namespace dpe::cuda
