#include "kernels/cuda/nll_loss.cuh"

#include "kernels/cuda/kernel_utils.cuh"

namespace dpe::cuda {

namespace {

constexpr unsigned long long kNoBadRow = ~0ull;

// The launchers' device scratch: the first bad row and the number of counted targets.
struct Scratch {
  unsigned long long bad_row;
  double count;
};

__device__ inline bool check_target(int64_t t, int64_t c, int64_t row,
                                    unsigned long long* bad_row) {
  if (t >= 0 && t < c) return true;
  atomicMin(bad_row, static_cast<unsigned long long>(row));
  return false;
}

// One block: the sum and the count in double, then -sum / count.
__global__ void nll_loss_kernel(const float* logp, const int64_t* target, float* out, int64_t n,
                                int64_t c, int64_t ignore_index, unsigned long long* bad_row) {
  __shared__ double shared[32];
  double acc = 0.0, count = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (t == ignore_index) continue;
    if (check_target(t, c, i, bad_row)) acc += logp[i * c + t];
    count += 1.0;
  }
  acc = block_sum(acc, shared);
  count = block_sum(count, shared);
  if (threadIdx.x == 0) *out = static_cast<float>(-acc / count);
}

// One block: the number of counted targets, which the gradient divides by.
__global__ void count_kernel(const int64_t* target, int64_t n, int64_t ignore_index,
                             double* count) {
  __shared__ double shared[32];
  double k = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) k += target[i] != ignore_index ? 1.0 : 0.0;
  k = block_sum(k, shared);
  if (threadIdx.x == 0) *count = k;
}

__global__ void nll_loss_backward_kernel(const float* gout, const int64_t* target, float* gx,
                                         int64_t n, int64_t c, int64_t ignore_index,
                                         const double* count, unsigned long long* bad_row) {
  const float g = -*gout / static_cast<float>(*count);
  DPE_GRID_STRIDE(i, n) {
    const int64_t t = target[i];
    if (t != ignore_index && check_target(t, c, i, bad_row)) gx[i * c + t] = g;
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

Scratch* reset_scratch(CudaContext& ctx) {
  auto* s = static_cast<Scratch*>(ctx.workspace(sizeof(Scratch)));
  // All bytes 0xff is kNoBadRow.
  DPE_CUDA_CHECK(cudaMemsetAsync(&s->bad_row, 0xff, sizeof(s->bad_row), stream_of(ctx)));
  return s;
}

}  // namespace

void nll_loss_forward(CudaContext& ctx, const float* logp, const int64_t* target, float* out,
                      int64_t n, int64_t c, int64_t ignore_index) {
  Scratch* s = reset_scratch(ctx);
  nll_loss_kernel<<<1, 1024, 0, stream_of(ctx)>>>(logp, target, out, n, c, ignore_index,
                                                  &s->bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, &s->bad_row, target, c);
}

void nll_loss_backward(CudaContext& ctx, const float* gout, const int64_t* target, float* gx,
                       int64_t n, int64_t c, int64_t ignore_index) {
  if (n * c > 0) DPE_CUDA_CHECK(cudaMemsetAsync(gx, 0, n * c * sizeof(float), stream_of(ctx)));
  if (n == 0) return;
  Scratch* s = reset_scratch(ctx);
  count_kernel<<<1, 1024, 0, stream_of(ctx)>>>(target, n, ignore_index, &s->count);
  DPE_CUDA_CHECK(cudaGetLastError());
  nll_loss_backward_kernel<<<grid_for(n), kBlock, 0, stream_of(ctx)>>>(
      gout, target, gx, n, c, ignore_index, &s->count, &s->bad_row);
  DPE_CUDA_CHECK(cudaGetLastError());
  throw_if_bad(ctx, &s->bad_row, target, c);
}

}  // namespace dpe::cuda
