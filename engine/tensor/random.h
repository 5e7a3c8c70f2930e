// Generator: a seedable source of random numbers, one per use site (no global RNG), and the
// initialisers PyTorch uses by default for Linear and Conv2d.
//
// Threading contract: a Generator is not synchronised: one thread at a time (Dropout shares one
// behind a mutex). The initialisers draw from the generator they are given.
#pragma once

#include <cstdint>
#include <random>

#include "engine/tensor/tensor.h"

namespace dpe {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : engine_(seed) {}
  void manual_seed(uint64_t seed) { engine_.seed(seed); }
  float uniform(float low, float high);
  float normal(float mean, float stddev);
  uint64_t next_u64() { return engine_(); }

 private:
  std::mt19937_64 engine_;
};

// Values drawn on the host, then placed on `device`.
Tensor rand_uniform(const Shape& shape, float low, float high, Generator& gen, Device device = {});
Tensor randn(const Shape& shape, Generator& gen, Device device = {});
// PyTorch's default for Linear/Conv weights: kaiming_uniform_(a=sqrt(5)), i.e.
// U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
Tensor kaiming_uniform(const Shape& shape, int64_t fan_in, Generator& gen, Device device = {});
// A random permutation of 0..n-1 (Fisher-Yates).
std::vector<int64_t> randperm(int64_t n, Generator& gen);

}  // namespace dpe
