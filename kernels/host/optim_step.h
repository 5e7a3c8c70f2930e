// Optimizer updates in place over n contiguous floats, with torch.optim's formulas:
// SGD (momentum, dampening, weight decay, Nesterov) and Adam / AdamW.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// buf is the momentum buffer (unused, may be null, when momentum == 0); on its `first` use it is
// set to the (decayed) gradient, as torch does with a clone.
void sgd_step(HostContext& ctx, float* param, const float* grad, float* buf, const SgdStepParams& o,
              bool first, int64_t n);

// `step` counts from 1 (the bias corrections use it).
void adam_step(HostContext& ctx, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamStepParams& o, int64_t step, int64_t n);

}  // namespace dpe::host
