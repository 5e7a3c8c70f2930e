// Batched matrix product on CUDA with optional transposes (kernels/op_params.h: BmmShape), one
// cublasSgemmStridedBatched call, FP32 math as the handle is set up (no TF32).
#pragma once

#include "kernels/op_params.h"

namespace dpe::cuda {

class CudaContext;

void bmm(CudaContext& ctx, const BmmShape& s, const float* a, const float* b, float* c);

}  // namespace dpe::cuda
