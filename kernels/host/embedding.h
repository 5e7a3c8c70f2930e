// Embedding lookup on the host, as torch.nn.functional.embedding(index, weight): row i of
// y [n, cols] is row index[i] of weight [rows, cols]; the gradient scatter-adds gy back into the
// rows (repeated indices accumulate).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// Throws dpe::Error "embedding: index 7 is out of range for 5 rows" for an index outside
// [0, rows), before writing anything.
void embedding_forward(HostContext& ctx, const float* weight, const int64_t* index, float* y,
                       int64_t n, int64_t rows, int64_t cols);
// gw [rows, cols] = 0, then gw[index[i], :] += gy[i, :]. Throws for a bad index as the forward.
void embedding_backward(HostContext& ctx, const int64_t* index, const float* gy, float* gw,
                        int64_t n, int64_t rows, int64_t cols);

// gw[r, :] += the sum of gy[i, :] over the i with index[i] == r (in order of i, from zero, as
// embedding_backward sums them), for each r an index names; the other rows are left as they are.
// Throws for a bad index as the forward, before writing anything.
void embedding_backward_accumulate(HostContext& ctx, const int64_t* index, const float* gy,
                                   float* gw, int64_t n, int64_t rows, int64_t cols);

}  // namespace dpe::host
