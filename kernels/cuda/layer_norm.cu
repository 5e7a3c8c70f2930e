#include "kernels/cuda/layer_norm.cuh"

#include <algorithm>

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // rows per block of the row kernels
constexpr int kChunkRows = 8;      // threadIdx.y extent of the parameter-gradient kernel
constexpr int64_t kMaxChunks = 256;

__device__ inline float warp_sum_all(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__global__ void layer_norm_kernel(const float* x, const float* gamma, const float* beta, float eps,
                                  float* y, float* mean, float* rstd, int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;  // a whole warp leaves together, so the shuffles stay full
  const float* in = x + row * cols;
  float* out = y + row * cols;
  float sum = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) sum += in[j];
  const float mu = warp_sum_all(sum) / static_cast<float>(cols);
  float sq = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) sq += (in[j] - mu) * (in[j] - mu);
  const float rs = 1.0f / sqrtf(warp_sum_all(sq) / static_cast<float>(cols) + eps);
  for (int64_t j = lane; j < cols; j += 32) {
    out[j] = (in[j] - mu) * rs * (gamma ? gamma[j] : 1.0f) + (beta ? beta[j] : 0.0f);
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

__global__ void layer_norm_grad_input_kernel(const float* x, const float* gy, const float* gamma,
                                             const float* mean, const float* rstd, float* gx,
                                             int64_t rows, int64_t cols) {
  const int64_t row = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* in = x + row * cols;
  const float* go = gy + row * cols;
  float* out = gx + row * cols;
  const float mu = mean[row], rs = rstd[row];
  float sum_g = 0.0f, sum_gx = 0.0f;
  for (int64_t j = lane; j < cols; j += 32) {
    const float g = go[j] * (gamma ? gamma[j] : 1.0f);
    sum_g += g;
    sum_gx += g * (in[j] - mu) * rs;
  }
  const float a = warp_sum_all(sum_g) / static_cast<float>(cols);
  const float b = warp_sum_all(sum_gx) / static_cast<float>(cols);
  for (int64_t j = lane; j < cols; j += 32) {
    const float g = go[j] * (gamma ? gamma[j] : 1.0f);
    out[j] = rs * (g - a - (in[j] - mu) * rs * b);
  }
}

// Block (32, kChunkRows): 32 columns; blockIdx.y is the chunk of rows it sums (rows strided by
// gridDim.y * kChunkRows), written to part_*[chunk, col].
__global__ void layer_norm_param_partials_kernel(const float* x, const float* gy,
                                                 const float* mean, const float* rstd,
                                                 float* part_g, float* part_b, int64_t rows,
                                                 int64_t cols) {
  __shared__ float sg[kChunkRows][33], sb[kChunkRows][33];
  const int64_t j = blockIdx.x * int64_t{32} + threadIdx.x;
  float acc_g = 0.0f, acc_b = 0.0f;
  if (j < cols) {
    for (int64_t r = blockIdx.y * int64_t{kChunkRows} + threadIdx.y; r < rows;
         r += int64_t{gridDim.y} * kChunkRows) {
      const float g = gy[r * cols + j];
      acc_b += g;
      acc_g += g * (x[r * cols + j] - mean[r]) * rstd[r];
    }
  }
  sg[threadIdx.y][threadIdx.x] = acc_g;
  sb[threadIdx.y][threadIdx.x] = acc_b;
  __syncthreads();
  if (threadIdx.y == 0 && j < cols) {
    float tg = 0.0f, tb = 0.0f;
    for (int k = 0; k < kChunkRows; ++k) {
      tg += sg[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    part_g[blockIdx.y * cols + j] = tg;
    part_b[blockIdx.y * cols + j] = tb;
  }
}

// out[j] = sum over chunks of part[chunk, j]; out may be null (not wanted).
__global__ void sum_chunks_kernel(const float* part_g, const float* part_b, int64_t chunks,
                                  int64_t cols, float* ggamma, float* gbeta) {
  DPE_GRID_STRIDE(j, cols) {
    float tg = 0.0f, tb = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
      tg += part_g[c * cols + j];
      tb += part_b[c * cols + j];
    }
    if (ggamma) ggamma[j] = tg;
    if (gbeta) gbeta[j] = tb;
  }
}

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

}  // namespace

void layer_norm_forward(CudaContext& ctx, const LayerNormShape& s, const float* x,
                        const float* gamma, const float* beta, float eps, float* y, float* mean,
                        float* rstd) {
  if (s.rows == 0) return;
  layer_norm_kernel<<<row_blocks(s.rows), kWarpsPerBlock * 32, 0, stream_of(ctx)>>>(
      x, gamma, beta, eps, y, mean, rstd, s.rows, s.cols);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void layer_norm_backward(CudaContext& ctx, const LayerNormShape& s, const float* x,
                         const float* gy, const float* gamma, const float* mean, const float* rstd,
                         float* gx, float* ggamma, float* gbeta) {
  if (s.rows > 0) {
    layer_norm_grad_input_kernel<<<row_blocks(s.rows), kWarpsPerBlock * 32, 0, stream_of(ctx)>>>(
        x, gy, gamma, mean, rstd, gx, s.rows, s.cols);
    DPE_CUDA_CHECK(cudaGetLastError());
  }
  if ((ggamma == nullptr && gbeta == nullptr) || s.cols == 0) return;
  const int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(kMaxChunks, (s.rows + 8 * kChunkRows - 1) / (8 * kChunkRows)));
  auto* part = static_cast<float*>(ctx.workspace(2 * chunks * s.cols * sizeof(float)));
  const dim3 grid(static_cast<unsigned>((s.cols + 31) / 32), static_cast<unsigned>(chunks));
  layer_norm_param_partials_kernel<<<grid, dim3(32, kChunkRows), 0, stream_of(ctx)>>>(
      x, gy, mean, rstd, part, part + chunks * s.cols, s.rows, s.cols);
  DPE_CUDA_CHECK(cudaGetLastError());
  sum_chunks_kernel<<<grid_for(s.cols), kBlock, 0, stream_of(ctx)>>>(
      part, part + chunks * s.cols, chunks, s.cols, ggamma, gbeta);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
