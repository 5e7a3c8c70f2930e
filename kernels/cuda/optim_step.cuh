// Optimizer updates on CUDA, in place over n contiguous floats, with the host's formulas
// (kernels/host/optim_step.h, torch.optim): SGD (momentum, dampening, weight decay, Nesterov) and
// Adam / AdamW (bias-correction scalars computed on the host in double, as torch does).
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

// buf may be null when momentum == 0; on its `first` use it is set to the (decayed) gradient.
void sgd_step(CudaContext& ctx, float* param, const float* grad, float* buf, const SgdOptions& o,
              bool first, int64_t n);

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw = false;
};

// `step` counts from 1.
void adam_step(CudaContext& ctx, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamOptions& o, int64_t step, int64_t n);

}  // namespace dpe::cuda
