#include "kernels/host/dropout.h"

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {

namespace {
// splitmix64's finaliser: a counter-based generator, one independent draw per element.
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
}  // namespace

void dropout_mask(HostContext&, float p, uint64_t seed, float* mask, int64_t n) {
  DPE_CHECK(p >= 0.0f && p <= 1.0f,
            "dropout: probability has to be between 0 and 1, but got " << p);
  // p == 1 drops everything (torch returns zeros rather than 0 * inf).
  const float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  const uint64_t base = mix(seed);
#pragma omp parallel for simd if (parallel : n >= kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    // 24 random bits give a uniform float in [0, 1).
    const float u = static_cast<float>(mix(base + static_cast<uint64_t>(i)) >> 40) * 0x1.0p-24f;
    mask[i] = u < p ? 0.0f : keep_scale;
  }
}

}  // namespace dpe::host
