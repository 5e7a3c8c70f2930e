#include "kernels/cuda/gelu.cuh"

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/lowp_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;

// The formulas, in float32, shared by every dtype's kernels.
__device__ inline float gelu_value(float v) {
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kCubic * v * v * v)));
}

__device__ inline float gelu_gradient(float v, float g) {
  const float t = tanhf(kSqrt2OverPi * (v + kCubic * v * v * v));
  const float dinner = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
  return g * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * dinner);
}

__global__ void gelu_kernel(const float* x, float* y, int64_t n) {
  DPE_GRID_STRIDE(i, n) y[i] = gelu_value(x[i]);
}

__global__ void gelu_backward_kernel(const float* x, const float* gy, float* gx, int64_t n) {
  DPE_GRID_STRIDE(i, n) gx[i] = gelu_gradient(x[i], gy[i]);
}

template <typename T>
__global__ void gelu_lowp_kernel(const T* x, T* y, int64_t n) {
  DPE_GRID_STRIDE(i, n) y[i] = lowp_from_float<T>(gelu_value(lowp_to_float(x[i])));
}

template <typename T>
__global__ void gelu_backward_lowp_kernel(const T* x, const T* gy, T* gx, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    gx[i] = lowp_from_float<T>(gelu_gradient(lowp_to_float(x[i]), lowp_to_float(gy[i])));
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

void gelu_forward_lowp(CudaContext& ctx, DType dt, const void* x, void* y, int64_t n) {
  if (n == 0) return;
  with_lowp_type(dt, "gelu", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_lowp_kernel<T><<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(static_cast<const T*>(x),
                                                                    static_cast<T*>(y), n);
  });
  DPE_CUDA_CHECK(cudaGetLastError());
}

void gelu_backward_lowp(CudaContext& ctx, DType dt, const void* x, const void* gy, void* gx,
                        int64_t n) {
  if (n == 0) return;
  with_lowp_type(dt, "gelu_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    gelu_backward_lowp_kernel<T><<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
        static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx), n);
  });
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
