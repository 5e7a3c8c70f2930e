// Negative log-likelihood loss with mean reduction over logp [n, c] at int64 targets [n],
// as torch.nn.functional.nll_loss(logp, target).
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// Returns -mean_i logp[i, target[i]]. Throws dpe::Error
// "nll_loss: target 12 is out of bounds for 10 classes" for a label outside [0, c).
float nll_loss_forward(HostContext& ctx, const float* logp, const int64_t* target, int64_t n,
                       int64_t c);
// gx[i, target[i]] = -gout / n, zero elsewhere.
void nll_loss_backward(HostContext& ctx, float gout, const int64_t* target, float* gx, int64_t n,
                       int64_t c);

}  // namespace dpe::host
