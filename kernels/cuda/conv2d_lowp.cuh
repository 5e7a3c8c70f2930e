// 2-D convolution on CUDA in bfloat16 and float16 (NCHW, square stride and padding, no dilation
// or groups), the 16-bit twin of conv2d.cuh and of the host's kernels/host/conv2d_lowp.h: x, w, b,
// y and their gradients of one dtype `dt`, as PyTorch's autocast gives them. cuDNN's legacy
// convolution API on CUDNN_DATA_BFLOAT16 / CUDNN_DATA_HALF tensors with float32 compute
// (PSEUDO_BFLOAT16 / PSEUDO_HALF configurations) and tensor-op math allowed, the best-ranked
// GEMM-like algorithm of the *_v7 heuristics (each output a float32 sum of its terms; FFT and
// Winograd skipped; a universally supported one as fallback), the workspace from the CudaContext.
// The bias is added in the accumulator (the output holds it and cuDNN blends with beta = 1), so
// each output is rounded once; the bias gradient sums gy in float32 with dpe's kernel and is
// rounded once.
#pragma once

#include "engine/core/dtype.h"
#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

// y = conv(x, w) + b; b may be null. n must be > 0.
void conv2d_forward_lowp(CudaContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                         const void* w, const void* b, void* y);
// Any of gx, gw, gb may be null: that gradient is not computed. n must be > 0.
void conv2d_backward_lowp(CudaContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb);

}  // namespace dpe::cuda
