// Device-side helpers shared by dpe's CUDA kernels: launch geometry, stream casts and block
// reductions. Included only by .cu files (it is CUDA code); every function is inline.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_context.h"

namespace dpe::cuda {

constexpr int kBlock = 256;  // threads per block of the elementwise and reduction kernels

// Blocks for a grid-stride loop over n elements (capped: the loop covers the rest).
inline int grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

inline cudaStream_t stream_of(CudaContext& ctx) { return static_cast<cudaStream_t>(ctx.stream()); }

#define DPE_GRID_STRIDE(i, n)                                               \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += int64_t{gridDim.x} * blockDim.x)

template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); the result is valid in thread 0.
// `shared` holds at least 32 T. Every thread of the block must call it.
template <typename T>
__device__ inline T block_sum(T v, T* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = threadIdx.x < warps ? shared[threadIdx.x] : T(0);
  if (warp == 0) v = warp_sum(v);
  return v;
}

// Max over the block with fmaxf (a NaN is ignored unless all are NaN, as std::fmax); valid in
// every thread (broadcast through shared[0]).
__device__ inline float block_max_all(float v, float* shared) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int offset = 16; offset > 0; offset >>= 1)
    v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  if (warp == 0) {
    v = threadIdx.x < warps ? shared[threadIdx.x] : -INFINITY;
    for (int offset = 16; offset > 0; offset >>= 1)
      v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, offset));
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

// block_sum whose result is broadcast to every thread.
template <typename T>
__device__ inline T block_sum_all(T v, T* shared) {
  v = block_sum(v, shared);
  __syncthreads();
  if (threadIdx.x == 0) shared[0] = v;
  __syncthreads();
  return shared[0];
}

}  // namespace dpe::cuda
