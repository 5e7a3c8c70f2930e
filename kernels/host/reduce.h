// Host reductions: sum of all elements, per-row argmax, the finiteness check, and the
// per-channel sums that batch norm (and SyncBatchNorm between ranks) is built from.
// Layout for channel reductions: x is [N, C, S] contiguous (S = H*W, or 1 for [N, C]).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// Accumulates in double, so the result does not depend on the thread count beyond rounding.
float sum_all(HostContext& ctx, const float* x, int64_t n);
// out[i] = index of the first maximum of row i of x [rows, cols]; a NaN counts as the maximum.
void argmax_rows(HostContext& ctx, const float* x, int64_t* out, int64_t rows, int64_t cols);
bool all_finite(HostContext& ctx, const float* x, int64_t n);
// sum[c] = sum x[:, c, :], sumsq[c] = sum x[:, c, :]^2.
void channel_sums(HostContext& ctx, const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                  int64_t s);
// sum_gy[c] = sum gy[:, c, :], sum_gy_xmu[c] = sum gy[:, c, :] * (x[:, c, :] - mean[c]).
void channel_grad_sums(HostContext& ctx, const float* x, const float* gy, const float* mean,
                       float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c, int64_t s);

}  // namespace dpe::host
