#include <cmath>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/optim_step.cuh"

namespace dpe::cuda {

namespace {

__global__ void sgd_kernel(float* param, const float* grad, int64_t n, float lr, float wd) {
  DPE_GRID_STRIDE(i, n) {
    const float d = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
    param[i] -= lr * d;
  }
}

__global__ void sgd_momentum_kernel(float* param, const float* grad, float* buf, int64_t n,
                                    float lr, float wd, float mom, float damp, bool nesterov,
                                    bool first) {
  DPE_GRID_STRIDE(i, n) {
    float d = wd != 0.0f ? grad[i] + wd * param[i] : grad[i];
    const float b = first ? d : mom * buf[i] + damp * d;
    buf[i] = b;
    d = nesterov ? d + mom * b : b;
    param[i] -= lr * d;
  }
}

__global__ void adam_kernel(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            int64_t n, float b1, float one_minus_b1, float b2, float one_minus_b2,
                            float eps, float l2, float decay, float step_size, float bc2_sqrt) {
  DPE_GRID_STRIDE(i, n) {
    float p = param[i] * decay;
    const float g = l2 != 0.0f ? grad[i] + l2 * param[i] : grad[i];
    // torch 1.13: exp_avg.mul_(beta1).add_(grad, alpha=1 - beta1), and addcmul_ for exp_avg_sq.
    const float m = exp_avg[i] * b1 + one_minus_b1 * g;
    const float v = exp_avg_sq[i] * b2 + one_minus_b2 * g * g;
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    const float denom = sqrtf(v) / bc2_sqrt + eps;
    p -= step_size * (m / denom);
    param[i] = p;
  }
}

}  // namespace

void sgd_step(CudaContext& ctx, float* param, const float* grad, float* buf, const SgdStepParams& o,
              bool first, int64_t n) {
  if (o.momentum == 0.0f) {
    if (n == 0) return;
    sgd_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(param, grad, n, o.lr, o.weight_decay);
    DPE_CUDA_CHECK(cudaGetLastError());
    return;
  }
  DPE_CHECK(buf != nullptr, "sgd_step: momentum " << o.momentum << " needs a momentum buffer");
  if (n == 0) return;
  sgd_momentum_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
      param, grad, buf, n, o.lr, o.weight_decay, o.momentum, 1.0f - o.dampening, o.nesterov, first);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void adam_step(CudaContext& ctx, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamStepParams& o, int64_t step, int64_t n) {
  DPE_CHECK(step >= 1, "adam_step: step counts from 1, got " << step);
  const double bc1 = 1.0 - std::pow(static_cast<double>(o.beta1), static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(static_cast<double>(o.beta2), static_cast<double>(step));
  const float step_size = static_cast<float>(static_cast<double>(o.lr) / bc1);
  const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
  const float l2 = o.adamw ? 0.0f : o.weight_decay;
  const float decay =
      o.adamw ? static_cast<float>(1.0 - static_cast<double>(o.lr) * o.weight_decay) : 1.0f;
  if (n == 0) return;
  // 1 - beta rounded once from the double betas, as PyTorch's Python scalars (op_params.h).
  adam_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
      param, grad, exp_avg, exp_avg_sq, n, static_cast<float>(o.beta1),
      static_cast<float>(1.0 - o.beta1), static_cast<float>(o.beta2),
      static_cast<float>(1.0 - o.beta2), o.eps, l2, decay, step_size, bc2_sqrt);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
