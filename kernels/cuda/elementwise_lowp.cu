#include "kernels/cuda/elementwise_lowp.cuh"
#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/lowp_utils.cuh"

namespace dpe::cuda {

namespace {

template <typename T>
__global__ void add_kernel(const T* a, const T* b, float alpha, T* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    out[i] = lowp_from_float<T>(lowp_to_float(a[i]) + alpha * lowp_to_float(b[i]));
  }
}

template <typename T>
__global__ void mul_kernel(const T* a, const T* b, T* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) out[i] = lowp_from_float<T>(lowp_to_float(a[i]) * lowp_to_float(b[i]));
}

template <typename T>
__global__ void scale_kernel(const T* a, float s, T* out, int64_t n) {
  DPE_GRID_STRIDE(i, n) out[i] = lowp_from_float<T>(lowp_to_float(a[i]) * s);
}

// On the words: a value is > 0 when its word is neither 0 nor above the dtype's infinity.
__global__ void relu_kernel(const uint16_t* x, uint16_t inf, uint16_t* y, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    const uint16_t v = x[i];
    y[i] = v != 0 && v <= inf ? v : uint16_t{0};
  }
}

__global__ void relu_backward_kernel(const uint16_t* y, const uint16_t* gy, uint16_t inf,
                                     uint16_t* gx, int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    const uint16_t v = y[i];
    gx[i] = v != 0 && v <= inf ? gy[i] : uint16_t{0};
  }
}

}  // namespace

void add_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, float alpha, void* out,
              int64_t n) {
  if (n == 0) return;
  with_lowp_type(dt, "add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    add_kernel<T><<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), alpha, static_cast<T*>(out), n);
  });
  DPE_CUDA_CHECK(cudaGetLastError());
}

void mul_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, void* out, int64_t n) {
  if (n == 0) return;
  with_lowp_type(dt, "mul", [&](auto tag) {
    using T = typename decltype(tag)::type;
    mul_kernel<T><<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
        static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n);
  });
  DPE_CUDA_CHECK(cudaGetLastError());
}

void scale_lowp(CudaContext& ctx, DType dt, const void* a, float s, void* out, int64_t n) {
  if (n == 0) return;
  with_lowp_type(dt, "scale", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scale_kernel<T><<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(static_cast<const T*>(a), s,
                                                                static_cast<T*>(out), n);
  });
  DPE_CUDA_CHECK(cudaGetLastError());
}

void relu_forward_lowp(CudaContext& ctx, DType dt, const void* x, void* y, int64_t n) {
  const uint16_t inf = lowp_infinity_bits(dt, "relu");
  if (n == 0) return;
  relu_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(static_cast<const uint16_t*>(x), inf,
                                                          static_cast<uint16_t*>(y), n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void relu_backward_lowp(CudaContext& ctx, DType dt, const void* y, const void* gy, void* gx,
                        int64_t n) {
  const uint16_t inf = lowp_infinity_bits(dt, "relu_backward");
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
      static_cast<const uint16_t*>(y), static_cast<const uint16_t*>(gy), inf,
      static_cast<uint16_t*>(gx), n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
