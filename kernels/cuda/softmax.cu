#include "kernels/cuda/softmax.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

__global__ void softmax_kernel(const float* x, float* y, int64_t tq, int64_t tk, bool causal) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const float* in = x + row * tk;
  float* out = y + row * tk;
  // Entries [0, valid) take part: all of them, or those up to the query's diagonal.
  int64_t valid = tk;
  if (causal) {
    valid = row % tq + 1 + (tk - tq);
    valid = valid < 0 ? 0 : (valid > tk ? tk : valid);
  }
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) mx = fmaxf(mx, in[j]);
  mx = block_max_all(mx, shared);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < valid; j += blockDim.x) sum += expf(in[j] - mx);
  sum = block_sum_all(sum, shared);
  const float inv = 1.0f / sum;
  for (int64_t j = threadIdx.x; j < tk; j += blockDim.x) {
    out[j] = j < valid ? expf(in[j] - mx) * inv : 0.0f;
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* gy, float* gx, int64_t cols) {
  __shared__ float shared[32];
  const float* yr = y + blockIdx.x * cols;
  const float* gr = gy + blockIdx.x * cols;
  float* out = gx + blockIdx.x * cols;
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) dot += gr[j] * yr[j];
  dot = block_sum_all(dot, shared);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[j] = yr[j] * (gr[j] - dot);
}

}  // namespace

void softmax_forward(CudaContext& ctx, const SoftmaxShape& s, const float* x, float* y) {
  const int64_t rows = s.batch * s.tq;
  if (rows == 0 || s.tk == 0) return;
  softmax_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(ctx)>>>(x, y, s.tq, s.tk,
                                                                            s.causal);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward(CudaContext& ctx, const float* y, const float* gy, float* gx, int64_t rows,
                      int64_t cols) {
  if (rows == 0 || cols == 0) return;
  softmax_backward_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(ctx)>>>(y, gy, gx,
                                                                                     cols);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
