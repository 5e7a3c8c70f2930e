#include "kernels/cuda/batch_norm.cuh"

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/reduce.cuh"

namespace dpe::cuda {

namespace {

// One block per channel: the mean, then the mean squared deviation (no E[x^2] - E[x]^2
// cancellation), as the host does; invstd = 1 / sqrt(var + eps) for the apply step.
__global__ void batch_stats_kernel(const float* x, int64_t n, int64_t c, int64_t s, float eps,
                                   float* mean, float* var, float* invstd) {
  __shared__ double shared[32];
  const int64_t ch = blockIdx.x;
  const int64_t m = n * s;
  double acc = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) acc += x[((k / s) * c + ch) * s + k % s];
  const float mu = static_cast<float>(block_sum_all(acc, shared) / static_cast<double>(m));
  double sq = 0.0;
  for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
    const float d = x[((k / s) * c + ch) * s + k % s] - mu;
    sq += static_cast<double>(d) * d;
  }
  sq = block_sum(sq, shared);
  if (threadIdx.x == 0) {
    const float v = static_cast<float>(sq / static_cast<double>(m));
    mean[ch] = mu;
    var[ch] = v;
    invstd[ch] = 1.0f / sqrtf(v + eps);
  }
}

__global__ void invstd_kernel(const float* var, float eps, float* invstd, int64_t c) {
  DPE_GRID_STRIDE(ch, c) invstd[ch] = 1.0f / sqrtf(var[ch] + eps);
}

__global__ void apply_kernel(const float* x, const float* mean, const float* invstd,
                             const float* gamma, const float* beta, float* y, int64_t total,
                             int64_t c, int64_t s) {
  DPE_GRID_STRIDE(i, total) {
    const int64_t ch = (i / s) % c;
    const float a = invstd[ch] * (gamma != nullptr ? gamma[ch] : 1.0f);
    const float b = (beta != nullptr ? beta[ch] : 0.0f) - mean[ch] * a;
    y[i] = x[i] * a + b;
  }
}

// From the channel sums (sum_gy, sum_gy_xmu, in place) to the gradients of gamma and beta and to
// the means batch_norm_backward_elemt takes.
__global__ void backward_channel_kernel(const float* var, float eps, float inv_m, float* sum_gy,
                                        float* sum_gy_xmu, float* invstd, float* ggamma,
                                        float* gbeta, int64_t c) {
  DPE_GRID_STRIDE(ch, c) {
    const float is = 1.0f / sqrtf(var[ch] + eps);
    if (ggamma != nullptr) ggamma[ch] = sum_gy_xmu[ch] * is;
    if (gbeta != nullptr) gbeta[ch] = sum_gy[ch];
    sum_gy[ch] *= inv_m;
    sum_gy_xmu[ch] *= inv_m;
    invstd[ch] = is;
  }
}

__global__ void backward_elemt_kernel(const float* x, const float* gy, const float* mean,
                                      const float* invstd, const float* gamma, const float* mean_gy,
                                      const float* mean_gy_xmu, float* gx, int64_t total, int64_t c,
                                      int64_t s) {
  DPE_GRID_STRIDE(i, total) {
    const int64_t ch = (i / s) % c;
    const float is = invstd[ch];
    const float proj = is * is * mean_gy_xmu[ch];
    const float g = is * (gamma != nullptr ? gamma[ch] : 1.0f);
    gx[i] = (gy[i] - mean_gy[ch] - (x[i] - mean[ch]) * proj) * g;
  }
}

}  // namespace

void batch_norm_elemt(CudaContext& ctx, const BatchNormShape& sh, const float* x, const float* mean,
                      const float* invstd, const float* gamma, const float* beta, float* y) {
  DPE_CHECK(!sh.channels_last, "batch_norm_elemt: no channels_last kernel on CUDA devices");
  const int64_t total = sh.n * sh.c * sh.s;
  if (total == 0) return;
  apply_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(x, mean, invstd, gamma, beta, y,
                                                               total, sh.c, sh.s);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void batch_norm_forward_train(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                              const float* gamma, const float* beta, float eps, float* y,
                              float* mean, float* var) {
  DPE_CHECK(!sh.channels_last, "batch_norm_forward_train: no channels_last kernel on CUDA devices");
  if (sh.c == 0) return;
  float* invstd = static_cast<float*>(ctx.workspace(sh.c * sizeof(float)));
  batch_stats_kernel<<<static_cast<unsigned>(sh.c), kBlock, 0, stream_of(ctx)>>>(
      x, sh.n, sh.c, sh.s, eps, mean, var, invstd);
  DPE_CUDA_CHECK(cudaGetLastError());
  batch_norm_elemt(ctx, sh, x, mean, invstd, gamma, beta, y);
}

void batch_norm_forward_eval(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                             const float* gamma, const float* beta, const float* mean,
                             const float* var, float eps, float* y) {
  DPE_CHECK(!sh.channels_last, "batch_norm_forward_eval: no channels_last kernel on CUDA devices");
  if (sh.c == 0) return;
  float* invstd = static_cast<float*>(ctx.workspace(sh.c * sizeof(float)));
  invstd_kernel<<<grid_for(sh.c), kBlock, 0, stream_of(ctx)>>>(var, eps, invstd, sh.c);
  DPE_CUDA_CHECK(cudaGetLastError());
  batch_norm_elemt(ctx, sh, x, mean, invstd, gamma, beta, y);
}

void batch_norm_backward(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* var,
                         float eps, float* gx, float* ggamma, float* gbeta) {
  DPE_CHECK(!sh.channels_last, "batch_norm_backward: no channels_last kernel on CUDA devices");
  if (sh.c == 0) return;
  // Three per-channel temporaries in one workspace request (a second request could move it).
  float* t = static_cast<float*>(ctx.workspace(3 * sh.c * sizeof(float)));
  float* mean_gy = t;
  float* mean_gy_xmu = t + sh.c;
  float* invstd = t + 2 * sh.c;
  channel_grad_sums(ctx, x, gy, mean, mean_gy, mean_gy_xmu, sh.n, sh.c, sh.s);
  const float inv_m = 1.0f / static_cast<float>(sh.n * sh.s);
  backward_channel_kernel<<<grid_for(sh.c), kBlock, 0, stream_of(ctx)>>>(
      var, eps, inv_m, mean_gy, mean_gy_xmu, invstd, ggamma, gbeta, sh.c);
  DPE_CUDA_CHECK(cudaGetLastError());
  batch_norm_backward_elemt(ctx, sh, x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx);
}

void batch_norm_backward_elemt(CudaContext& ctx, const BatchNormShape& sh, const float* x,
                               const float* gy, const float* mean, const float* invstd,
                               const float* gamma, const float* mean_gy, const float* mean_gy_xmu,
                               float* gx) {
  DPE_CHECK(!sh.channels_last,
            "batch_norm_backward_elemt: no channels_last kernel on CUDA devices");
  const int64_t total = sh.n * sh.c * sh.s;
  if (total == 0) return;
  backward_elemt_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(
      x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx, total, sh.c, sh.s);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
