// linear, matmul and bmm on CUDA in bfloat16 and float16, the 16-bit twins of linear.cuh,
// matmul.cuh and bmm.cuh and of the host's kernels/host/linear_lowp.h: tensors of one dtype `dt`,
// as PyTorch's autocast gives them. cuBLAS GemmEx (GemmStridedBatchedEx for bmm) with 16-bit
// operands and output and float32 accumulation (CUBLAS_COMPUTE_32F: tensor cores where cuBLAS
// picks them), each output rounded once; a bias is added in the accumulator (the output holds
// the bias and the product is added with beta = 1), as the host's does.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// y [n, o] = x [n, i] @ w^T + b; b may be null.
void linear_forward_lowp(CudaContext& ctx, DType dt, const LinearShape& s, const void* x,
                         const void* w, const void* b, void* y);
// Any of gx, gw, gb may be null. gw and gb are multiplied by param_grad_scale; gb sums gy's rows
// in float32 and is rounded once.
void linear_backward_lowp(CudaContext& ctx, DType dt, const LinearShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb,
                          float param_grad_scale);
// c [m, n] = a [m, k] @ b [k, n].
void matmul_lowp(CudaContext& ctx, DType dt, const void* a, const void* b, void* c, int64_t m,
                 int64_t k, int64_t n);
// c [B, M, N] = op(a) @ op(b) per batch.
void bmm_lowp(CudaContext& ctx, DType dt, const BmmShape& s, const void* a, const void* b, void* c);

}  // namespace dpe::cuda
