// Optimizer updates on CUDA, in place over n contiguous floats, with the host's formulas
// (kernels/host/optim_step.h, torch.optim): SGD (momentum, dampening, weight decay, Nesterov) and
// Adam / AdamW (bias-correction scalars computed on the host in double, as torch does).
#pragma once

#include <cstdint>

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// buf may be null when momentum == 0; on its `first` use it is set to the (decayed) gradient.
void sgd_step(CudaContext& ctx, float* param, const float* grad, float* buf, const SgdStepParams& o,
              bool first, int64_t n);

// `step` counts from 1.
void adam_step(CudaContext& ctx, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamStepParams& o, int64_t step, int64_t n);

}  // namespace dpe::cuda
