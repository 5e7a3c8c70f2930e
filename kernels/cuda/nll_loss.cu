#include "kernels/cuda/nll_loss.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr unsigned long long kNoBadRow = ~0ull;

__device__ inline bool check_target(int64_t t, int64_t c, int64_t row,
                                    unsigned long long* bad_row) {
  if (t >= 0 && t < c) return true;
  atomicMin(bad_row, static_cast<unsigned long long>(row));
  return false;
}

// One block: the sum in double, then -sum / n.
__global__ void nll_loss_kernel(const float* logp, const int64_t* target, float* out, int64_t n,
                                int64_t c, unsigned long long* bad_row) {
  __shared__ double shared[32];
  double acc = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (check_target(t, c, i, bad_row)) acc += logp[i * c + t];
  }
  acc = block_sum(acc, shared);
  if (threadIdx.x == 0) *out = static_cast<float>(-acc / static_cast<double>(n));
}

__global__ void nll_loss_backward_kernel(const float* gout, const int64_t* target, float* gx,
                                         int64_t n, int64_t c, unsigned long long* bad_row) {
  const float g = -*gout / static_cast<float>(n);
  DPE_GRID_STRIDE(i, n) {
    const int64_t t = target[i];
    if (check_target(t, c, i, bad_row)) gx[i * c + t] = g;
  }
}

// Throws the host's message for the first bad row, if any (waits for the stream).
void throw_if_bad(CudaContext& ctx, const unsigned long long* bad_row, const int64_t* target,
                  int64_t c) {
  unsigned long long row = kNoBadRow;
  ctx.read_back(&row, bad_row, sizeof(row));
  if (row == kNoBadRow) return;
  int64_t t = 0;
  ctx.read_back(&t, target + row, sizeof(t));
  DPE_THROW("nll_loss: target " << t << " is out of bounds for " << c << " classes");
}

unsigned long long* reset_flag(CudaContext& ctx) {
  auto* flag = static_cast<unsigned long long*>(ctx.workspace(sizeof(unsigned long long)));
  // All bytes 0xff is kNoBadRow.
  DPE_CUDA_CHECK(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), stream_of(ctx)));
  return flag;
}

}  // namespace

void nll_loss_forward(CudaContext& ctx, const float* logp, const int64_t* target, float* out,
                      int64_t n, int64_t c) {
  unsigned long long* bad_row = reset_flag(ctx);
  nll_loss_kernel<<<1, 1024, 0, stream_of(ctx)>>>(logp, target, out, n, c, bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, bad_row, target, c);
}

void nll_loss_backward(CudaContext& ctx, const float* gout, const int64_t* target, float* gx,
                       int64_t n, int64_t c) {
  if (n * c > 0) DPE_CUDA_CHECK(cudaMemsetAsync(gx, 0, n * c * sizeof(float), stream_of(ctx)));
  if (n == 0) return;
  unsigned long long* bad_row = reset_flag(ctx);
  nll_loss_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(gout, target, gx, n, c,
                                                                       bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, bad_row, target, c);
}

}  // namespace dpe::cuda
