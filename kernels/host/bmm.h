// Batched matrix product on the host, as torch.bmm with optional transposes: c[i] = op(a[i]) @
// op(b[i]) for every batch i (kernels/op_params.h: BmmShape). One oneDNN matmul primitive with a
// batch dimension; a transposed operand is a strided memory descriptor, so nothing is copied.
#pragma once

#include "kernels/host/host_context.h"
#include "kernels/op_params.h"

namespace dpe::host {

void bmm(HostContext& ctx, const BmmShape& s, const float* a, const float* b, float* c);

}  // namespace dpe::host
