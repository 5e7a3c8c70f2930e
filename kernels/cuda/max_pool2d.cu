#include "kernels/cuda/max_pool2d.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

// One thread per output element.
__global__ void max_pool2d_kernel(Pool2dShape s, const float* x, float* y, int64_t* indices) {
  const int64_t total = s.n * s.c * s.ho * s.wo;
  DPE_GRID_STRIDE(i, total) {
    const int64_t ow = i % s.wo, oh = (i / s.wo) % s.ho, plane = i / (s.wo * s.ho);
    const float* in = x + plane * s.h * s.w;
    const int64_t h0 = oh * s.stride - s.padding, w0 = ow * s.stride - s.padding;
    const int64_t hs = h0 > 0 ? h0 : 0, ws = w0 > 0 ? w0 : 0;
    const int64_t he = h0 + s.kernel < s.h ? h0 + s.kernel : s.h;
    const int64_t we = w0 + s.kernel < s.w ? w0 + s.kernel : s.w;
    float best = -INFINITY;
    int64_t best_i = hs * s.w + ws;
    for (int64_t ih = hs; ih < he; ++ih) {
      for (int64_t iw = ws; iw < we; ++iw) {
        const float v = in[ih * s.w + iw];
        // The host's rule: a larger value or a NaN replaces the maximum; it keeps scanning after
        // a NaN, so a later NaN replaces an earlier one. Match that: the last NaN wins.
        if (v > best || isnan(v)) {
          best = v;
          best_i = ih * s.w + iw;
        }
      }
    }
    y[i] = best;
    indices[i] = best_i;
  }
}

__global__ void max_pool2d_backward_kernel(Pool2dShape s, const float* gy, const int64_t* indices,
                                           float* gx) {
  const int64_t total = s.n * s.c * s.ho * s.wo;
  DPE_GRID_STRIDE(i, total) {
    const int64_t plane = i / (s.wo * s.ho);
    atomicAdd(gx + plane * s.h * s.w + indices[i], gy[i]);
  }
}

}  // namespace

void max_pool2d_forward(CudaContext& ctx, const Pool2dShape& s, const float* x, float* y,
                        int64_t* indices) {
  DPE_CHECK(!s.channels_last, "max_pool2d_forward: no channels_last kernel on CUDA devices");
  const int64_t total = s.n * s.c * s.ho * s.wo;
  if (total == 0) return;
  max_pool2d_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(s, x, y, indices);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void max_pool2d_backward(CudaContext& ctx, const Pool2dShape& s, const float* gy,
                         const int64_t* indices, float* gx) {
  DPE_CHECK(!s.channels_last, "max_pool2d_backward: no channels_last kernel on CUDA devices");
  const int64_t in_total = s.n * s.c * s.h * s.w;
  if (in_total == 0) return;
  DPE_CUDA_CHECK(cudaMemsetAsync(gx, 0, in_total * sizeof(float), stream_of(ctx)));
  const int64_t total = s.n * s.c * s.ho * s.wo;
  if (total == 0) return;
  max_pool2d_backward_kernel<<<grid_for(total), kBlock, 0, stream_of(ctx)>>>(s, gy, indices, gx);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
