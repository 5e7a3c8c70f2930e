// Negative log-likelihood loss with mean reduction over logp [n, c] at int64 targets [n],
// as torch.nn.functional.nll_loss(logp, target, ignore_index=ignore_index): targets equal to
// ignore_index contribute nothing and are not counted in the mean.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

// out[0] = -sum logp[i, target[i]] / (number of targets not ignored): NaN when all are ignored
// (or n == 0), as torch. Throws dpe::Error "nll_loss: target 12 is out of bounds for 10 classes"
// for a target outside [0, c) that is not ignore_index.
void nll_loss_forward(HostContext& ctx, const float* logp, const int64_t* target, float* out,
                      int64_t n, int64_t c, int64_t ignore_index);
// gx[i, target[i]] = -gout[0] / (number not ignored) for targets not ignored, zero elsewhere.
void nll_loss_backward(HostContext& ctx, const float* gout, const int64_t* target, float* gx,
                       int64_t n, int64_t c, int64_t ignore_index);

// The number of targets[0, n) that are not ignore_index, each checked to lie in [0, c): throws
// dpe::Error "<op>: target 12 is out of bounds for 10 classes" before anything is written. Shared
// with the cross-entropy kernels.
int64_t counted_targets(const char* op, const int64_t* target, int64_t n, int64_t c,
                        int64_t ignore_index);

}  // namespace dpe::host
