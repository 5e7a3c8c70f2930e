#include "engine/data/torch_generator.h"

#include "engine/core/error.h"

namespace dpe {

namespace {
constexpr int kM = 397;  // MT19937's middle word
constexpr uint32_t kMatrixA = 0x9908b0dfu;
constexpr uint32_t kUpperMask = 0x80000000u;
constexpr uint32_t kLowerMask = 0x7fffffffu;
}  // namespace

void TorchGenerator::manual_seed(uint64_t seed) {
  // init_genrand: the low 32 bits seed word 0, each next word mixes the previous one.
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int j = 1; j < kN; ++j) {
    const uint32_t prev = state_[j - 1];
    state_[j] = 1812433253u * (prev ^ (prev >> 30)) + static_cast<uint32_t>(j);
  }
  next_ = kN;
}

void TorchGenerator::twist() {
  for (int k = 0; k < kN; ++k) {
    const uint32_t y = (state_[k] & kUpperMask) | (state_[(k + 1) % kN] & kLowerMask);
    state_[k] = state_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrixA : 0u);
  }
  next_ = 0;
}

uint32_t TorchGenerator::random() {
  if (next_ >= kN) twist();
  uint32_t y = state_[next_++];
  // Tempering.
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t TorchGenerator::random64() {
  const uint64_t hi = random();
  const uint64_t lo = random();
  return (hi << 32) | lo;
}

std::vector<int64_t> torch_randperm(int64_t n, TorchGenerator& gen) {
  DPE_CHECK(n >= 0, "randperm: n must be non-negative, got " << n);
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[i] = i;
  // Forward Fisher-Yates with one 32-bit draw per step: the draw's type and the order of the
  // steps both decide the result, so neither may change.
  for (int64_t i = 0; i + 1 < n; ++i) {
    const int64_t z = static_cast<int64_t>(gen.random() % static_cast<uint64_t>(n - i));
    std::swap(r[i], r[z + i]);
  }
  return r;
}

}  // namespace dpe
