// A parameter's gradient multiplied in place by a scalar, on its device:
// what gradient clipping (clip_grad.h) and loss scaling's unscale_ (grad_scaler.h) both do to
// every gradient. The gradient's version is bumped.
//
// Threading contract: the optimizer's (one thread, after backward returned).
#pragma once

#include "engine/tensor/tensor.h"

namespace dpe::optim {

// g *= s; g float32. Dense gradients (contiguous or channels last) are scaled in place; for any
// other strided view the scaled copy's write-back is refused by copy_ (a gradient is not one).
void scale_gradient_(Tensor& g, float s);

}  // namespace dpe::optim
