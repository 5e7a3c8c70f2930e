// The casts autocast makes at the ops of its lists (engine/autograd/autocast.h): differentiable
// (ops::to), cached for parameters within a forward, and applied by the ops themselves at their
// entry (ops_linear.cc, ops_conv.cc, ops_loss.cc, ...).
//
// Threading contract: as the ops'; the state read is the calling thread's.
#pragma once

#include "engine/autograd/autocast.h"
#include "engine/tensor/tensor.h"

namespace dpe::autocast_detail {

// Whether the op on `first` follows autocast now (autocast::active for its device type).
inline bool applies(const Tensor& first) {
  return first.defined() && active(first.device().type());
}

// A lower-precision list op's argument: in the guard's dtype (floating tensors only).
Tensor lower(const Tensor& t);
// A float32 list op's argument: in float32 (floating tensors only).
Tensor float32(const Tensor& t);

// Whether an op of dpe's own float32 entries (batch norm and its fused forms, max pooling: ops
// without 16-bit kernels, which PyTorch runs in their input's dtype) reads `x` in float32 now:
// autocast applies to it and it is 16-bit. docs/mixed_precision.md says why the values are
// PyTorch's all the same.
inline bool widens(const Tensor& x) {
  return applies(x) && (x.dtype() == DType::kBFloat16 || x.dtype() == DType::kFloat16);
}

}  // namespace dpe::autocast_detail
