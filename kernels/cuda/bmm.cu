#include "kernels/cuda/bmm.cuh"

#include <cublas_v2.h>

#include <climits>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"

namespace dpe::cuda {

namespace {

int as_int(int64_t v) {
  DPE_CHECK(v <= INT_MAX, "bmm: size " << v << " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

}  // namespace

void bmm(CudaContext& ctx, const BmmShape& s, const float* a, const float* b, float* c) {
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) {
    DPE_CUDA_CHECK(
        cudaMemsetAsync(c, 0, s.batch * s.m * s.n * sizeof(float), stream_of(ctx)));
    return;
  }
  // Row-major c[m, n] is column-major c^T[n, m] = op(b)^T @ op(a)^T. A row-major operand read
  // column-major is its transpose, so an untransposed operand needs no op and a transposed one
  // (held as [n, k] or [k, m]) needs CUBLAS_OP_T; leading dims are the held rows' lengths.
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldb = s.trans_b ? s.k : s.n;
  const int64_t lda = s.trans_a ? s.m : s.k;
  const float one = 1.0f, zero = 0.0f;
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  DPE_CUBLAS_CHECK(
      cublasSgemmStridedBatched(h, op_b, op_a, as_int(s.n), as_int(s.m), as_int(s.k), &one, b,
                                as_int(ldb), s.k * s.n, a, as_int(lda), s.m * s.k, &zero, c,
                                as_int(s.n), s.m * s.n, as_int(s.batch)),
      ctx.device());
}

}  // namespace dpe::cuda
