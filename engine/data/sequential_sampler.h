// SequentialSampler: 0, 1, ..., n-1 every epoch (PyTorch's SequentialSampler).
//
// Threading contract: immutable; any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/sampler.h"

namespace dpe {

class SequentialSampler : public Sampler {
 public:
  // n: the dataset size. Throws dpe::Error when negative.
  explicit SequentialSampler(int64_t n);

  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;

 private:
  int64_t n_;
};

}  // namespace dpe
