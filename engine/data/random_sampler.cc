#include "engine/data/random_sampler.h"

#include "engine/core/error.h"

namespace dpe {

RandomSampler::RandomSampler(int64_t n, uint64_t seed, Order order)
    : n_(n), seed_(seed), order_(order), cached_gen_(seed) {
  DPE_CHECK(n >= 0, "RandomSampler: the dataset size must be non-negative, got " << n);
}

void RandomSampler::set_epoch(int64_t epoch) {
  DPE_CHECK(epoch >= 0, "RandomSampler: the epoch must be non-negative, got " << epoch);
  epoch_ = epoch;
}

uint64_t RandomSampler::draws_before_permutation() const {
  // DataLoader's _BaseDataLoaderIter draws base_seed = int64 random_() (one random64) first.
  return order_ == Order::kDataLoader ? 2 : 0;
}

uint64_t RandomSampler::draws_per_pass() const {
  // Two randperm(n) of n - 1 draws each: the pass's own, and the one 1.13 draws as it ends.
  const uint64_t perm = n_ > 0 ? static_cast<uint64_t>(n_ - 1) : 0;
  return draws_before_permutation() + 2 * perm;
}

std::vector<int64_t> RandomSampler::indices() const {
  if (epoch_ < cached_pass_) {
    cached_gen_.manual_seed(seed_);
    cached_pass_ = 0;
  }
  const uint64_t per_pass = draws_per_pass();
  for (; cached_pass_ < epoch_; ++cached_pass_) {
    for (uint64_t i = 0; i < per_pass; ++i) cached_gen_.random();
  }
  TorchGenerator gen = cached_gen_;
  for (uint64_t i = 0; i < draws_before_permutation(); ++i) gen.random();
  return torch_randperm(n_, gen);
}

}  // namespace dpe
