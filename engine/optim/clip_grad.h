// clip_grad_norm_: torch.nn.utils.clip_grad_norm_(parameters, max_norm) with the 2-norm. The total
// norm is taken over the gradients of all parameters together, which may sit on different devices:
// each device sums the squares of its own gradients, and the per-device partial sums are added on
// the host. When total > max_norm (to within PyTorch's 1e-6), every gradient is scaled in place by
// max_norm / (total + 1e-6). Parameters without a gradient are skipped.
//
// Threading contract: call from one thread, with no backward running on the gradients' devices
// (as an optimizer step).
#pragma once

#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe::optim {

// Returns the total 2-norm of the gradients before clipping (0 when none has a gradient).
float clip_grad_norm_(const std::vector<Tensor>& params, float max_norm);

}  // namespace dpe::optim
