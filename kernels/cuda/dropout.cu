#include "kernels/cuda/dropout.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

// splitmix64's finaliser, as kernels/host/dropout.cc.
__host__ __device__ inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void dropout_mask_kernel(float p, float keep_scale, uint64_t base, float* mask,
                                    int64_t n) {
  DPE_GRID_STRIDE(i, n) {
    // 24 random bits give a uniform float in [0, 1).
    const float u = static_cast<float>(mix(base + static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f;
    mask[i] = u < p ? 0.0f : keep_scale;
  }
}

}  // namespace

void dropout_mask(CudaContext& ctx, float p, uint64_t seed, float* mask, int64_t n) {
  DPE_CHECK(p >= 0.0f && p <= 1.0f,
            "dropout: probability has to be between 0 and 1, but got " << p);
  if (n == 0) return;
  // p == 1 drops everything (torch returns zeros rather than 0 * inf).
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  dropout_mask_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(p, keep_scale, mix(seed), mask,
                                                                  n);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
