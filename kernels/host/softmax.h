// Softmax over the last dim on the host, as torch.softmax(x, -1), with an optional causal mask
// (kernels/op_params.h: SoftmaxShape): masked entries are exactly 0 and take no part in the max
// or the sum, which is what adding -inf to them before the softmax gives.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

void softmax_forward(HostContext& ctx, const SoftmaxShape& s, const float* x, float* y);
// gx = y * (gy - sum(gy * y)) per row of `cols`, y the forward's output (masked entries are 0
// in y, so their gradient is 0 too: the mask needs no second look).
void softmax_backward(HostContext& ctx, const float* y, const float* gy, float* gx, int64_t rows,
                      int64_t cols);

}  // namespace dpe::host
