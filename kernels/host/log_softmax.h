// Row-wise log-softmax over x [rows, cols] and its gradient, as torch.log_softmax(x, dim=1), and
// the cross-entropy that fuses it with the NLL loss.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

void log_softmax_forward(HostContext& ctx, const float* x, float* y, int64_t rows, int64_t cols);
// gx = gy - exp(y) * sum_j gy[j], per row; y is the forward output.
void log_softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols);

// torch.nn.functional.cross_entropy of logits x [rows, cols] at int64 targets [rows]: the mean of
// lse[r] - x[r, target[r]] over the rows whose target is not ignore_index (NaN when none is), as
// log_softmax then nll_loss, without the [rows, cols] log-probabilities in memory. lse [rows]:
// each row's log-sum-exp, for the backward. A target out of [0, cols) (not ignore_index) is an
// error, raised before anything is written.
void cross_entropy_forward(HostContext& ctx, const float* x, const int64_t* target, float* out,
                           float* lse, int64_t rows, int64_t cols, int64_t ignore_index);
// gx = (onehot(target) - softmax(x)) * s per row, s = -gout / count (count: the rows that count;
// 0 in the others), the gradient log_softmax's backward computes from nll_loss's.
void cross_entropy_backward(HostContext& ctx, const float* x, const int64_t* target,
                            const float* lse, const float* gout, float* gx, int64_t rows,
                            int64_t cols, int64_t ignore_index);

}  // namespace dpe::host
