// Dropout masks on CUDA: mask[i] is 0 with probability p, else 1 / (1 - p). The draw of element i
// is a counter-based hash of (seed, i) — the same splitmix64 formula as the host
// (kernels/host/dropout.cc), so a mask is deterministic and matches the host's bit for bit.
#pragma once

#include <cstdint>

namespace dpe::cuda {

class CudaContext;

// Throws for p outside [0, 1], as the host does.
void dropout_mask(CudaContext& ctx, float p, uint64_t seed, float* mask, int64_t n);

}  // namespace dpe::cuda
