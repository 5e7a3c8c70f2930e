// linear, matmul and bmm in bfloat16 and float16 on the host (kernels/host/lowp_gemm.h: oneDNN's
// bf16 matmul on AMX or AVX512-BF16, float32 accumulation), the 16-bit twins of linear.h,
// matmul.h and bmm.h: tensors of one dtype `dt`, as PyTorch's autocast gives them.
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// y [n, o] = x [n, i] @ w^T + b; b may be null.
void linear_forward_lowp(HostContext& ctx, DType dt, const LinearShape& s, const void* x,
                         const void* w, const void* b, void* y);
// Any of gx, gw, gb may be null. gw and gb are multiplied by param_grad_scale; gb sums gy's rows
// in float32 and is rounded once.
void linear_backward_lowp(HostContext& ctx, DType dt, const LinearShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb,
                          float param_grad_scale);
// c [m, n] = a [m, k] @ b [k, n].
void matmul_lowp(HostContext& ctx, DType dt, const void* a, const void* b, void* c, int64_t m,
                 int64_t k, int64_t n);
// c [B, M, N] = op(a) @ op(b) per batch.
void bmm_lowp(HostContext& ctx, DType dt, const BmmShape& s, const void* a, const void* b, void* c);

}  // namespace dpe::host
