#include "kernels/cuda/embedding.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr unsigned long long kNoBadRow = ~0ull;

__global__ void embedding_kernel(const float* weight, const int64_t* index, float* y, int64_t n,
                                 int64_t rows, int64_t cols, unsigned long long* bad_row) {
  DPE_GRID_STRIDE(e, n * cols) {
    const int64_t i = e / cols, j = e % cols;
    const int64_t r = index[i];
    if (r < 0 || r >= rows) {
      atomicMin(bad_row, static_cast<unsigned long long>(i));
      continue;
    }
    y[e] = weight[r * cols + j];
  }
}

__global__ void embedding_backward_kernel(const int64_t* index, const float* gy, float* gw,
                                          int64_t n, int64_t rows, int64_t cols,
                                          unsigned long long* bad_row) {
  DPE_GRID_STRIDE(e, n * cols) {
    const int64_t i = e / cols, j = e % cols;
    const int64_t r = index[i];
    if (r < 0 || r >= rows) {
      atomicMin(bad_row, static_cast<unsigned long long>(i));
      continue;
    }
    atomicAdd(gw + r * cols + j, gy[e]);
  }
}

unsigned long long* reset_flag(CudaContext& ctx) {
  auto* flag = static_cast<unsigned long long*>(ctx.workspace(sizeof(unsigned long long)));
  // All bytes 0xff is kNoBadRow.
  DPE_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), stream_of(ctx)));
  return flag;
}

// Throws the host's message for the first bad position, if any (waits for the stream).
void throw_if_bad(CudaContext& ctx, const unsigned long long* bad_row, const int64_t* index,
                  int64_t rows) {
  unsigned long long i = kNoBadRow;
  ctx.read_back(&i, bad_row, sizeof(i));
  if (i == kNoBadRow) return;
  int64_t r = 0;
  ctx.read_back(&r, index + i, sizeof(r));
  DPE_THROW("embedding: index " << r << " is out of range for " << rows << " rows");
}

}  // namespace

void embedding_forward(CudaContext& ctx, const float* weight, const int64_t* index, float* y,
                       int64_t n, int64_t rows, int64_t cols) {
  if (n == 0 || cols == 0) return;
  unsigned long long* bad_row = reset_flag(ctx);
  embedding_kernel<<<grid_for(n * cols), kBlock, 0, stream_of(ctx)>>>(weight, index, y, n, rows,
                                                                      cols, bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, bad_row, index, rows);
}

void embedding_backward(CudaContext& ctx, const int64_t* index, const float* gy, float* gw,
                        int64_t n, int64_t rows, int64_t cols) {
  if (rows * cols > 0) {
    DPE_CUDA_CHECK(cudaMemsetAsync(gw, 0, rows * cols * sizeof(float), stream_of(ctx)));
  }
  if (n == 0 || cols == 0) return;
  unsigned long long* bad_row = reset_flag(ctx);
  embedding_backward_kernel<<<grid_for(n * cols), kBlock, 0, stream_of(ctx)>>>(index, gy, gw, n,
                                                                               rows, cols, bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, bad_row, index, rows);
}

}  // namespace dpe::cuda
