#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/kernel_utils.cuh"
#include "kernels/cuda/library_check.cuh"
#include "kernels/cuda/linear_lowp.cuh"
#include "kernels/cuda/lowp_utils.cuh"

namespace dpe::cuda {

namespace {

cudaDataType_t cuda_type(DType dt, const char* op) {
  switch (dt) {
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    case DType::kFloat32:
    case DType::kInt64:
      break;
  }
  DPE_THROW(op << ": no 16-bit CUDA kernel for " << dtype_name(dt));
}

int as_int(int64_t v, const char* op) {
  DPE_CHECK(v <= INT_MAX, op << ": size " << v << " exceeds cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// A leading dimension: at least 1, as cuBLAS requires even for an empty operand.
int ld(int64_t v, const char* op) { return as_int(std::max<int64_t>(v, 1), op); }

// Column-major C[m, n] = alpha op(A)[m, k] @ op(B)[k, n] + beta C, every matrix of dtype dt,
// accumulated in float32 and rounded once into C.
void gemm(CudaContext& ctx, DType dt, const char* op, cublasOperation_t ta, cublasOperation_t tb,
          int64_t m, int64_t n, int64_t k, const void* a, int64_t lda, const void* b, int64_t ldb,
          void* c, int64_t ldc, float alpha, float beta) {
  const cudaDataType_t t = cuda_type(dt, op);
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  DPE_CUBLAS_CHECK(cublasGemmEx(h, ta, tb, as_int(m, op), as_int(n, op), as_int(k, op), &alpha, a,
                                t, ld(lda, op), b, t, ld(ldb, op), &beta, c, t, ld(ldc, op),
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                   ctx.device());
}

void zero(CudaContext& ctx, void* p, int64_t n) {
  if (n > 0) DPE_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(uint16_t), stream_of(ctx)));
}

// y[r, j] = b[j]: the bias as the product's prior output (the words copied, no rounding).
__global__ void fill_rows_kernel(uint16_t* y, const uint16_t* b, int64_t rows, int64_t cols) {
  DPE_GRID_STRIDE(i, rows * cols) y[i] = b[i % cols];
}

// out[j] = scale * the sum of x's rows, accumulated in float32 in row order and rounded once.
// One thread per column: neighbouring threads read neighbouring addresses.
template <typename T>
__global__ void column_sums_kernel(const T* x, T* out, int64_t rows, int64_t cols, float scale) {
  DPE_GRID_STRIDE(j, cols) {
    float acc = 0.0f;
    for (int64_t r = 0; r < rows; ++r) acc += lowp_to_float(x[r * cols + j]);
    out[j] = lowp_from_float<T>(acc * scale);
  }
}

}  // namespace

void linear_forward_lowp(CudaContext& ctx, DType dt, const LinearShape& s, const void* x,
                         const void* w, const void* b, void* y) {
  cuda_type(dt, "linear");
  if (s.batch == 0 || s.out == 0) return;
  float beta = 0.0f;
  if (b != nullptr) {
    fill_rows_kernel<<<grid_for(s.batch * s.out), kBlock, 0, stream_of(ctx)>>>(
        static_cast<uint16_t*>(y), static_cast<const uint16_t*>(b), s.batch, s.out);
    DPE_CUDA_CHECK(cudaGetLastError());
    beta = 1.0f;
  } else if (s.in == 0) {
    zero(ctx, y, s.batch * s.out);
  }
  if (s.in == 0) return;
  // As linear.cu: row-major y[n, o] is column-major y^T[o, n] = (w as column-major [i, o])^T @
  // (x as [i, n]); w stored [in, out] is column-major [o, i] already.
  if (s.w_transposed) {
    gemm(ctx, dt, "linear", CUBLAS_OP_N, CUBLAS_OP_N, s.out, s.batch, s.in, w, s.out, x, s.in, y,
         s.out, 1.0f, beta);
  } else {
    gemm(ctx, dt, "linear", CUBLAS_OP_T, CUBLAS_OP_N, s.out, s.batch, s.in, w, s.in, x, s.in, y,
         s.out, 1.0f, beta);
  }
}

void linear_backward_lowp(CudaContext& ctx, DType dt, const LinearShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb,
                          float param_grad_scale) {
  const char* op = "linear_backward";
  cuda_type(dt, op);
  if (gx != nullptr && s.batch * s.in > 0) {
    if (s.out == 0) {
      zero(ctx, gx, s.batch * s.in);
    } else if (s.w_transposed) {  // gx[n, i] = gy[n, o] @ w[o, i]
      gemm(ctx, dt, op, CUBLAS_OP_T, CUBLAS_OP_N, s.in, s.batch, s.out, w, s.out, gy, s.out, gx,
           s.in, 1.0f, 0.0f);
    } else {
      gemm(ctx, dt, op, CUBLAS_OP_N, CUBLAS_OP_N, s.in, s.batch, s.out, w, s.in, gy, s.out, gx,
           s.in, 1.0f, 0.0f);
    }
  }
  if (gw != nullptr && s.out * s.in > 0) {
    if (s.batch == 0) {
      zero(ctx, gw, s.out * s.in);
    } else if (s.w_transposed) {  // gw [i, o] = x^T [i, n] @ gy [n, o]
      gemm(ctx, dt, op, CUBLAS_OP_N, CUBLAS_OP_T, s.out, s.in, s.batch, gy, s.out, x, s.in, gw,
           s.out, param_grad_scale, 0.0f);
    } else {  // gw [o, i] = gy^T [o, n] @ x [n, i]
      gemm(ctx, dt, op, CUBLAS_OP_N, CUBLAS_OP_T, s.in, s.out, s.batch, x, s.in, gy, s.out, gw,
           s.in, param_grad_scale, 0.0f);
    }
  }
  if (gb != nullptr && s.out > 0) {
    with_lowp_type(dt, op, [&](auto tag) {
      using T = typename decltype(tag)::type;
      column_sums_kernel<T><<<grid_for(s.out), kBlock, 0, stream_of(ctx)>>>(
          static_cast<const T*>(gy), static_cast<T*>(gb), s.batch, s.out, param_grad_scale);
    });
    DPE_CUDA_CHECK(cudaGetLastError());
  }
}

void matmul_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, void* c, int64_t m,
                 int64_t k, int64_t n) {
  cuda_type(dt, "matmul");
  if (m == 0 || n == 0) return;
  if (k == 0) return zero(ctx, c, m * n);
  // As matmul.cu: row-major c[m, n] is column-major c^T[n, m] = b^T[n, k] @ a^T[k, m].
  gemm(ctx, dt, "matmul", CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, b, n, a, k, c, n, 1.0f, 0.0f);
}

void bmm_lowp(CudaContext& ctx, DType dt, const BmmShape& s, const void* a, const void* b,
              void* c) {
  const char* op = "bmm";
  const cudaDataType_t t = cuda_type(dt, op);
  if (s.batch == 0 || s.m == 0 || s.n == 0) return;
  if (s.k == 0) return zero(ctx, c, s.batch * s.m * s.n);
  // As bmm.cu: row-major c[m, n] is column-major c^T[n, m] = op(b)^T @ op(a)^T; a transposed
  // operand (held as [n, k] or [k, m]) needs CUBLAS_OP_T; leading dims are the held rows' lengths.
  const cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t ldb = s.trans_b ? s.k : s.n;
  const int64_t lda = s.trans_a ? s.m : s.k;
  const float one = 1.0f, zero_f = 0.0f;
  auto h = static_cast<cublasHandle_t>(ctx.cublas());
  DPE_CUBLAS_CHECK(
      cublasGemmStridedBatchedEx(h, op_b, op_a, as_int(s.n, op), as_int(s.m, op), as_int(s.k, op),
                                 &one, b, t, as_int(ldb, op), s.k * s.n, a, t, as_int(lda, op),
                                 s.m * s.k, &zero_f, c, t, as_int(s.n, op), s.m * s.n,
                                 as_int(s.batch, op), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      ctx.device());
}

}  // namespace dpe::cuda
