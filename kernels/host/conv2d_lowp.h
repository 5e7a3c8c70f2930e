// conv2d in bfloat16 and float16 on the host, the 16-bit twin of conv2d.h: x, w, b, y and their
// gradients of one dtype `dt`, as PyTorch's autocast gives them. oneDNN's bf16 convolutions where
// they run on AMX tiles and the layer fills them (at least 16 input channels); every other case
// (float16 in oneDNN 2.6, CPUs without AMX, a first layer of one channel) computes in float32 on
// converted copies through conv2d.h's kernels and rounds each output once: the same result as the
// native path within the output's rounding.
//
// Threading contract: as every host kernel (kernels/host/host_context.h).
#pragma once

#include "engine/core/dtype.h"
#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

// y = conv(x, w) + b; b may be null.
void conv2d_forward_lowp(HostContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                         const void* w, const void* b, void* y);
// Any of gx, gw, gb may be null; gb sums gy in float32 and is rounded once.
void conv2d_backward_lowp(HostContext& ctx, DType dt, const Conv2dShape& s, const void* x,
                          const void* w, const void* gy, void* gx, void* gw, void* gb);

// Whether the layer runs on the matrix unit (oneDNN on AMX) for dt on this CPU: false where it is
// emulated in float32.
bool conv2d_lowp_native(HostContext& ctx, DType dt, const Conv2dShape& s);

}  // namespace dpe::host
