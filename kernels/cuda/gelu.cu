#include "kernels/cuda/gelu.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    const float v = x[i];
    y[i] = 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* gy, float* gx, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    const float v = x[i];
    const float t = tanhf(kSqrt2OverPi * (v + kCubic * v * v * v));
    const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    gx[i] = gy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
  }
}

}  // namespace

void gelu_forward(CudaContext& ctx, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  gelu_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(x, y, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(CudaContext& ctx, const float* x, const float* gy, float* gx, int64_t n) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(x, gy, gx, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
