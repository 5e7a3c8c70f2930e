#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"
#include "kernels/cuda/linear.cuh"
#include "kernels/cuda/reduce.cuh"

namespace dpe::cuda {

namespace {

__global__ void add_row_bias_kernel(float* y, const float* b, int64_t rows, int64_t cols) {
  DPE_GRID_STRIDE(i, rows * cols) y[i] += b[i % cols];
}

int as_int(int64_t v, const char* what) {
  DPE_CHECK(v <= INT_MAX, "linear: " << what << " " << v << " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// Column-major C[m, n] = alpha op(A)[m, k] @ op(B)[k, n] (beta = 0). Leading dimensions are
// clamped to 1 for empty operands, as cuBLAS requires ld >= 1.
void sgemm(CudaContext& ctx, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
           int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
           int64_t ldc, float alpha = 1.0f) {
  const float zero = 0.0f;
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  DPE_CUBLAS_CHECK(cublasSgemm(h, ta, tb, as_int(m, "size"), as_int(n, "size"), as_int(k, "size"),
                               &alpha, a, as_int(std::max<int64_t>(lda, 1), "size"), b,
                               as_int(std::max<int64_t>(ldb, 1), "size"), &zero, c,
                               as_int(std::max<int64_t>(ldc, 1), "size")),
                   ctx.device());
}

void zero(CudaContext& ctx, float* p, int64_t n) {
  if (n > 0) DPE_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), stream_of(ctx)));
}

}  // namespace

void linear_forward(CudaContext& ctx, const LinearShape& s, const float* x, const float* w,
                    const float* b, float* y) {
  if (s.batch == 0 || s.out == 0) return;
  if (s.in == 0) {
    zero(ctx, y, s.batch * s.out);
  } else {
    // Row-major y[n, o] is column-major y^T[o, n] = (w as column-major [i, o])^T @ (x as [i, n]);
    // w stored [in, out] is column-major [o, i] already.
    if (s.w_transposed) {
      sgemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, s.out, s.batch, s.in, w, s.out, x, s.in, y, s.out);
    } else {
      sgemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.batch, s.in, w, s.in, x, s.in, y, s.out);
    }
  }
  if (b != nullptr) {
    add_row_bias_kernel<<<grid_for(s.batch * s.out), kBlock, 0, stream_of(ctx)>>>(y, b, s.batch,
                                                                                  s.out);
    DPE_CUDA_CHECK(cudaGetLastError());
  }
}

void linear_backward(CudaContext& ctx, const LinearShape& s, const float* x, const float* w,
                     const float* gy, float* gx, float* gw, float* gb, float param_grad_scale) {
  if (gx != nullptr && s.batch * s.in > 0) {
    if (s.out == 0) {
      zero(ctx, gx, s.batch * s.in);
    } else {
      // gx[n, i] = gy[n, o] @ w[o, i]; column-major gx^T[i, n] = w^T[i, o] @ gy^T[o, n] (w stored
      // [in, out]: column-major [o, i], transposed).
      if (s.w_transposed) {
        sgemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, s.in, s.batch, s.out, w, s.out, gy, s.out, gx, s.in);
      } else {
        sgemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.batch, s.out, w, s.in, gy, s.out, gx, s.in);
      }
    }
  }
  if (gw != nullptr && s.out * s.in > 0) {
    if (s.batch == 0) {
      zero(ctx, gw, s.out * s.in);
    } else {
      // gw[o, i] = gy^T[o, n] @ x[n, i]; column-major gw^T[i, o] = x^T[i, n] @ gy[n, o]. Stored
      // [in, out] (column-major [o, i]): gw = gy^T[o, n] @ x[n, i] as column-major products.
      if (s.w_transposed) {
        sgemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.out, s.in, s.batch, gy, s.out, x, s.in, gw, s.out,
              param_grad_scale);
      } else {
        sgemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.batch, x, s.in, gy, s.out, gw, s.in,
              param_grad_scale);
      }
    }
  }
  if (gb != nullptr) column_sums(ctx, gy, gb, s.batch, s.out, param_grad_scale);
}

}  // namespace dpe::cuda
