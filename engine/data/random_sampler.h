// RandomSampler: a permutation of 0..n-1 drawn from a Generator seeded with seed + epoch, so an
// epoch's order is reproducible and set_epoch() reshuffles (PyTorch's RandomSampler without
// replacement; the order is dpe's own, not torch's bit for bit).
//
// Threading contract: not thread-safe (set_epoch writes); see sampler.h.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/sampler.h"

namespace dpe {

class RandomSampler : public Sampler {
 public:
  // n: the dataset size. Throws dpe::Error when negative.
  explicit RandomSampler(int64_t n, uint64_t seed = 0);

  int64_t size() const override { return n_; }
  std::vector<int64_t> indices() const override;
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t n_;
  uint64_t seed_;
  int64_t epoch_ = 0;
};

}  // namespace dpe
