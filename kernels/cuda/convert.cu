#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "engine/core/error.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/cuda_check.h"

namespace dpe::cuda {

namespace {

constexpr int kBlock = 256;

int grid_for(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<int>(blocks < 65535 ? (blocks > 0 ? blocks : 1) : 65535);
}

// Every element through float32 (int64 to int64 is a copy and never comes here).
__device__ float load(DType t, const void* p, int64_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kInt64:
      return static_cast<float>(static_cast<const int64_t*>(p)[i]);
    case DType::kBFloat16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kFloat16:
      return __half2float(static_cast<const __half*>(p)[i]);
  }
  return 0.0f;
}

__device__ void store(DType t, void* p, int64_t i, float v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = v;
      return;
    case DType::kInt64:
      static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
      return;
    case DType::kBFloat16:
      static_cast<uint16_t*>(p)[i] =
          isnan(v) ? uint16_t{0x7fc0} : __bfloat16_as_ushort(__float2bfloat16_rn(v));
      return;
    case DType::kFloat16:
      static_cast<uint16_t*>(p)[i] =
          isnan(v) ? uint16_t{0x7e00} : __half_as_ushort(__float2half_rn(v));
      return;
  }
}

__global__ void convert_kernel(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                               int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    store(dst_dtype, dst, i, load(src_dtype, src, i));
  }
}

}  // namespace

void convert(void* stream, void* dst, DType dst_dtype, const void* src, DType src_dtype,
             int64_t n) {
  if (n <= 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (dst_dtype == src_dtype) {
    if (dst != src) {
      DPE_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(src_dtype),
                                     cudaMemcpyDeviceToDevice, s));
    }
    return;
  }
  convert_kernel<<<grid_for(n), kBlock, 0, s>>>(dst, dst_dtype, src, src_dtype, n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
