// TorchGenerator and torch_randperm: PyTorch 1.13's CPU random generator and its CPU randperm,
// reproduced bit for bit so that dpe's shuffling samplers visit exactly PyTorch's order.
//
// Design note "torch order" (what PyTorch 1.13 does, read from its source and checked against
// python3-torch 1.13.1 by tests/engine/data/golden/make_sampler_golden.py):
//   * torch.Generator().manual_seed(s) is a 32-bit Mersenne Twister (MT19937, Matsumoto and
//     Nishimura's init_genrand) seeded with the low 32 bits of s: seeds that agree modulo 2^32
//     give the same stream. The state is refilled ("twisted") lazily, on the first draw.
//   * random() is one 32-bit output; random64() is two, the first one the high word.
//   * torch.randperm(n, generator=g) on the CPU, int64, for every n in 1.13: start from 0..n-1
//     and for i = 0 .. n-2 swap element i with element i + random() % (n - i): n - 1 draws of
//     32 bits (none for n <= 1), modulo bias included. Later PyTorch releases (the change of
//     pytorch/pytorch#143682, 2025) switched n >= 2^32 / 20 (214748364) to an inside-out shuffle
//     with 64-bit draws; 1.13 has no such threshold, and the golden lists check n = 214748364.
//
// Threading contract: a TorchGenerator is a value with no synchronisation: one thread at a time.
// torch_randperm draws from the generator it is given and touches nothing else.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

namespace dpe {

class TorchGenerator {
 public:
  // torch.Generator().manual_seed(seed); torch's default seed is 67280421310721, but dpe's
  // samplers always seed explicitly.
  explicit TorchGenerator(uint64_t seed = 0) { manual_seed(seed); }

  // Restarts the stream as torch.Generator.manual_seed(seed) does (only seed mod 2^32 matters).
  void manual_seed(uint64_t seed);
  // One 32-bit output (CPUGeneratorImpl::random).
  uint32_t random();
  // Two 32-bit outputs, the first in the high word (CPUGeneratorImpl::random64).
  uint64_t random64();

 private:
  static constexpr int kN = 624;  // MT19937's state words
  void twist();

  std::array<uint32_t, kN> state_{};
  int next_ = kN;  // the next state word to temper; kN means "twist before the next draw"
};

// torch.randperm(n, generator=gen).tolist() for the CPU generator (see the design note above).
// Throws dpe::Error when n < 0, as torch does.
std::vector<int64_t> torch_randperm(int64_t n, TorchGenerator& gen);

}  // namespace dpe
