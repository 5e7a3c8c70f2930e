#include "engine/data/random_sampler.h"

#include "engine/core/error.h"
#include "engine/tensor/random.h"

namespace dpe {

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  DPE_CHECK(n >= 0, "RandomSampler: the dataset size must be non-negative, got " << n);
}

std::vector<int64_t> RandomSampler::indices() const {
  Generator gen(seed_ + static_cast<uint64_t>(epoch_));
  return randperm(n_, gen);
}

}  // namespace dpe
