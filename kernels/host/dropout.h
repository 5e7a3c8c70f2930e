// Dropout masks: mask[i] is 0 with probability p and 1/(1-p) otherwise, so y = x * mask keeps
// the expectation of x. The mask is a pure function of (seed, i), so it does not depend on the
// number of threads that make it.
#pragma once

#include <cstdint>

#include "kernels/host/host_context.h"

namespace dpe::host {

void dropout_mask(HostContext& ctx, float p, uint64_t seed, float* mask, int64_t n);

}  // namespace dpe::host
