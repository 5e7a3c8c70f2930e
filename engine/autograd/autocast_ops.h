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

}  // namespace dpe::autocast_detail
