#include "kernels/host/optim_step.h"

#include <cmath>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

void sgd_step(HostContext&, float* param, const float* grad, float* buf, const SgdOptions& o,
              bool first, int64_t n) {
  const float lr = o.lr, wd = o.weight_decay, mom = o.momentum, damp = 1.0f - o.dampening;
  if (mom == 0.0f) {
#pragma omp parallel for simd if (n >= kParallelGrain)
    for (int64_t i = 0; i < n; ++i) {
      const float d = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
      param[i] -= lr * d;
    }
    return;
  }
  DPE_CHECK(buf != nullptr, "sgd_step: momentum " << mom << " needs a momentum buffer");
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
    const float b = first ? d : mom * buf[i] + damp * d;
    buf[i] = b;
    d = o.nesterov ? d + mom * b : b;
    param[i] -= lr * d;
  }
}

void adam_step(HostContext&, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamOptions& o, int64_t step, int64_t n) {
  DPE_CHECK(step >= 1, "adam_step: step counts from 1, got " << step);
  // torch computes these scalars in Python (double) and hands them to float kernels.
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(static_cast<double>(o.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float b1 = o.beta1, b2 = o.beta2, eps = o.eps;
  const float l2 = o.adamw ? 0.0f : o.weight_decay;
  const float decay = o.adamw ? 1.0f - o.lr * o.weight_decay : 1.0f;
#pragma omp parallel for simd if (n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    float p = param[i] * decay;
    const float g = l2 != 0.0f ? grad[i] + l2 * param[i] : grad[i];
    const float m = exp_avg[i] + (1.0f - b1) * (g - exp_avg[i]);  // torch's lerp_
    const float v = exp_avg_sq[i] * b2 + (1.0f - b2) * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = std::sqrt(v) / bc2_sqrt + eps;
    p -= step_size * (m / denom);
    param[i] = p;
  }
}

}  // namespace dpe::host
