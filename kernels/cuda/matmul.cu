#include "kernels/cuda/matmul.cuh"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"

namespace dpe::cuda {

namespace {

int as_int(int64_t v) {
  DPE_CHECK(v <= INT_MAX, "matmul: size " << v << " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(std::max<int64_t>(v, 1));
}

}  // namespace

void matmul(CudaContext& ctx, const float* a, const float* b, float* c, int64_t m, int64_t k,
            int64_t n) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    DPE_CUDA_CHECK(cudaMemsetAsync(c, 0, m * n * sizeof(float), stream_of(ctx)));
    return;
  }
  // Row-major c[m, n] is column-major c^T[n, m] = b^T[n, k] @ a^T[k, m], and a row-major matrix
  // read column-major is its transpose: no explicit transposition is needed.
  const float one = 1.0f, zero = 0.0f;
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  DPE_CUBLAS_CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, as_int(n), as_int(m), as_int(k), &one,
                               b, as_int(n), a, as_int(k), &zero, c, as_int(n)),
                   ctx.device());
}

}  // namespace dpe::cuda
