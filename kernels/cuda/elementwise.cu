#include "kernels/cuda/elementwise.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

__global__ void add_kernel(const float* a, const float* b, float alpha, float* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) out[i] = a[i] + alpha * b[i];
}

__global__ void mul_kernel(const float* a, const float* b, float* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) out[i] = a[i] * b[i];
}

__global__ void scale_kernel(const float* a, float s, float* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) out[i] = s * a[i];
}

__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  DPE_GRID_STRIDE(i, n) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

__global__ void relu_backward_kernel(const float* y, const float* gy, float* gx, int64_t n) {
  DPE_GRID_STRIDE(i, n) gx[i] = y[i] > 0.0f ? gy[i] : 0.0f;
}

}  // namespace

void add_forward(CudaContext& ctx, const float* a, const float* b, float alpha, float* out,
                 int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(a, b, alpha, out, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void mul_forward(CudaContext& ctx, const float* a, const float* b, float* out, int64_t n) {
  if (n == 0) return;
  mul_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(a, b, out, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void scale_forward(CudaContext& ctx, const float* a, float s, float* out, int64_t n) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(a, s, out, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void relu_forward(CudaContext& ctx, const float* x, float* y, int64_t n) {
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(x, y, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(CudaContext& ctx, const float* y, const float* gy, float* gx, int64_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(y, gy, gx, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
