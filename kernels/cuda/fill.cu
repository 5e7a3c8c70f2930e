#include "kernels/cuda/fill.cuh"

#include "kernels/cuda/cuda_check.h"

namespace dpe::cuda {

namespace {

constexpr int kBlock = 256;

__global__ void fill_kernel(float* out, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = value;
  }
}

__global__ void add_kernel(float* out, const float* a, const float* b, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = a[i] + alpha * b[i];
  }
}

int grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

}  // namespace

void fill_forward(void* stream, float* out, int64_t n, float value) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(out, n, value);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void add_forward(void* stream, float* out, const float* a, const float* b, float alpha, int64_t n) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(out, a, b, alpha, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
