#include "kernels/cuda/log_softmax.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

__global__ void log_softmax_kernel(const float* x, float* y, int64_t cols) {
  __shared__ float shared[32];
  const float* in = x + blockIdx.x * cols;
  float* out = y + blockIdx.x * cols;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) mx = fmaxf(mx, in[j]);
  mx = block_max_all(mx, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(in[j] - mx);
  sum = block_sum_all(sum, shared);
  const float lse = mx + logf(sum);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] = in[j] - lse;
}

__global__ void log_softmax_backward_kernel(const float* y, const float* gy, float* gx,
                                            int64_t cols) {
  __shared__ float shared[32];
  const float* yr = y + blockIdx.x * cols;
  const float* gr = gy + blockIdx.x * cols;
  float* out = gx + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += gr[j];
  sum = block_sum_all(sum, shared);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] = gr[j] - expf(yr[j]) * sum;
}

}  // namespace

void log_softmax_forward(CudaContext& ctx, const float* x, float* y, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  log_softmax_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(ctx)>>>(x, y, cols);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void log_softmax_backward(CudaContext& ctx, const float* y, const float* gy, float* gx,
                          int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  log_softmax_backward_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(ctx)>>>(y, gy, gx,
                                                                                          cols);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
