#include "kernels/cuda/reduce.cuh"

#include <algorithm>

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr int kPartials = 1024;  // blocks of sum_all's first pass

__global__ void partial_sums_kernel(const float* x, int64_t n, double* partial) {
  __shared__ double shared[32];
  double acc = 0.0;
  DPE_GRID_STRIDE(i, n) acc += x[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

__global__ void finish_sum_kernel(const double* partial, int count, float* out) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = static_cast<float>(acc);
}

// (value, index) of the running argmax, with the host's rule: the first NaN wins, else the first
// maximum.
struct Best {
  float v;
  int64_t i;
};

__device__ inline Best better(Best a, Best b) {
  const bool an = isnan(a.v), bn = isnan(b.v);
  if (an || bn) {
    if (an && bn) return a.i < b.i ? a : b;
    return an ? a : b;
  }
  if (b.v > a.v || (b.v == a.v && b.i < a.i)) return b;
  return a;
}

// One block per row.
__global__ void argmax_rows_kernel(const float* x, int64_t* out, int64_t cols) {
  __shared__ float sv[kBlock];
  __shared__ int64_t si[kBlock];
  const float* row = x + blockIdx.x * cols;
  Best best{row[0], 0};
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) best = better(best, Best{row[j], j});
  sv[threadIdx.x] = best.v;
  si[threadIdx.x] = best.i;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half >>= 1) {
    if (threadIdx.x < half) {
      const Best b = better(Best{sv[threadIdx.x], si[threadIdx.x]},
                            Best{sv[threadIdx.x + half], si[threadIdx.x + half]});
      sv[threadIdx.x] = b.v;
      si[threadIdx.x] = b.i;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = si[0];
}

__global__ void not_finite_kernel(const float* x, int64_t n, int* flag) {
  DPE_GRID_STRIDE(i, n) {
    if (!isfinite(x[i])) *flag = 1;  // a benign race: every writer stores the same value
  }
}

// One block per channel.
__global__ void channel_sums_kernel(const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                                    int64_t s) {
  __shared__ double shared[32];
  const int64_t ch = blockIdx.x;
  double a1 = 0.0, a2 = 0.0;
  for (int64_t k = threadIdx.x; k < n * s; k += blockDim.x) {
    const float v = x[((k / s) * c + ch) * s + k % s];
    a1 += v;
    a2 += static_cast<double>(v) * v;
  }
  a1 = block_sum(a1, shared);
  a2 = block_sum(a2, shared);
  if (threadIdx.x == 0) {
    sum[ch] = static_cast<float>(a1);
    sumsq[ch] = static_cast<float>(a2);
  }
}

__global__ void channel_grad_sums_kernel(const float* x, const float* gy, const float* mean,
                                         float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c,
                                         int64_t s) {
  __shared__ double shared[32];
  const int64_t ch = blockIdx.x;
  const float m = mean[ch];
  double a1 = 0.0, a2 = 0.0;
  for (int64_t k = threadIdx.x; k < n * s; k += blockDim.x) {
    const int64_t at = ((k / s) * c + ch) * s + k % s;
    a1 += gy[at];
    a2 += static_cast<double>(gy[at]) * (x[at] - m);
  }
  a1 = block_sum(a1, shared);
  a2 = block_sum(a2, shared);
  if (threadIdx.x == 0) {
    sum_gy[ch] = static_cast<float>(a1);
    sum_gy_xmu[ch] = static_cast<float>(a2);
  }
}

// One thread per column: neighbouring threads read neighbouring addresses.
__global__ void column_sums_kernel(const float* x, float* out, int64_t rows, int64_t cols,
                                   float scale) {
  DPE_GRID_STRIDE(j, cols) {
    double acc = 0.0;
    for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + j];
    out[j] = scale == 1.0f ? static_cast<float>(acc) : static_cast<float>(acc) * scale;
  }
}

}  // namespace

void sum_all(CudaContext& ctx, const float* x, float* out, int64_t n) {
  double* partial = static_cast<double*>(ctx.workspace(kPartials * sizeof(double)));
  const int blocks = n == 0 ? 1 : static_cast<int>(std::min<int64_t>(grid_for(n), kPartials));
  partial_sums_kernel<<<blocks, kBlock, 0, stream_of(ctx)>>>(x, n, partial);
  DPE_CUDA_CHECK(cudaGetLastError());
  finish_sum_kernel<<<1, kBlock, 0, stream_of(ctx)>>>(partial, blocks, out);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void argmax_rows(CudaContext& ctx, const float* x, int64_t* out, int64_t rows, int64_t cols) {
  if (rows == 0) return;
  // Rows go in grid.x (up to 2^31 - 1).
  argmax_rows_kernel<<<static_cast<unsigned>(rows), kBlock, 0, stream_of(ctx)>>>(x, out, cols);
  DPE_CUDA_CHECK(cudaGetLastError());
}

bool all_finite(CudaContext& ctx, const float* x, int64_t n) {
  if (n == 0) return true;
  int* flag = static_cast<int*>(ctx.workspace(sizeof(int)));
  DPE_CUDA_CHECK(cudaMemsetAsync(flag, 0, sizeof(int), stream_of(ctx)));
  not_finite_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(x, n, flag);
  DPE_CUDA_CHECK(cudaGetLastError());
  int host_flag = 0;
  ctx.read_back(&host_flag, flag, sizeof(int));
  return host_flag == 0;
}

void channel_sums(CudaContext& ctx, const float* x, float* sum, float* sumsq, int64_t n, int64_t c,
                  int64_t s) {
  if (c == 0) return;
  channel_sums_kernel<<<static_cast<unsigned>(c), kBlock, 0, stream_of(ctx)>>>(x, sum, sumsq, n, c,
                                                                               s);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void channel_grad_sums(CudaContext& ctx, const float* x, const float* gy, const float* mean,
                       float* sum_gy, float* sum_gy_xmu, int64_t n, int64_t c, int64_t s) {
  if (c == 0) return;
  channel_grad_sums_kernel<<<static_cast<unsigned>(c), kBlock, 0, stream_of(ctx)>>>(
      x, gy, mean, sum_gy, sum_gy_xmu, n, c, s);
  DPE_CUDA_CHECK(cudaGetLastError());
}

void column_sums(CudaContext& ctx, const float* x, float* out, int64_t rows, int64_t cols,
                 float scale) {
  if (cols == 0) return;
  column_sums_kernel<<<grid_for(cols), kBlock, 0, stream_of(ctx)>>>(x, out, rows, cols, scale);
  DPE_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dpe::cuda
