// cross_entropy of bfloat16 or float16 logits on the host: autocast keeps the op in float32, and
// these kernels read the 16-bit logits through a conversion row by row (exact: every 16-bit value
// is a float32) instead of a float32 copy of the whole [rows, cols] tensor, so a language model's
// loss does not hold its logits twice. The loss and lse are float32; the gradient is computed in
// float32 and rounded once to dt, the same values as log_softmax.h's float32 kernels on the
// widened logits followed by a cast of their gradient.
//
// Threading contract: as every host kernel (kernels/host/host_context.h).
#pragma once

#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/host/host_context.h"

namespace dpe::host {

// x [rows, cols] of dtype dt; out: the scalar mean loss; lse [rows] float32.
void cross_entropy_forward_lowp(HostContext& ctx, DType dt, const void* x, const int64_t* target,
                                float* out, float* lse, int64_t rows, int64_t cols,
                                int64_t ignore_index);
// gx [rows, cols] of dtype dt.
void cross_entropy_backward_lowp(HostContext& ctx, DType dt, const void* x, const int64_t* target,
                                 const float* lse, const float* gout, void* gx, int64_t rows,
                                 int64_t cols, int64_t ignore_index);

}  // namespace dpe::host
