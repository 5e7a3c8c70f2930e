#include "engine/data/sequential_sampler.h"

#include <numeric>

#include "engine/core/error.h"

namespace dpe {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  DPE_CHECK(n >= 0, "SequentialSampler: the dataset size must be non-negative, got " << n);
}

std::vector<int64_t> SequentialSampler::indices() const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

}  // namespace dpe
