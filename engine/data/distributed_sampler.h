// DistributedSampler: the share of a dataset one rank of a data-parallel job visits each epoch,
// with PyTorch's rules (torch/utils/data/distributed.py):
//   num_samples = ceil(n / replicas), or with drop_last and n % replicas != 0
//                 ceil((n - replicas) / replicas) (= floor(n / replicas));
//   total_size  = num_samples * replicas;
//   order       = randperm(n) seeded with seed + epoch when shuffling, else 0..n-1;
//   not drop_last: pad to total_size by repeating the order from its start (cyclically when the
//   padding is longer than n); drop_last: truncate to total_size;
//   rank r takes order[r : total_size : replicas].
// The shuffled order is PyTorch 1.13's bit for bit (design note "torch order" in
// torch_generator.h): DistributedSampler(n, R, r, true, seed, drop_last) after set_epoch(e) gives
// exactly torch's DistributedSampler(dataset of length n, num_replicas=R, rank=r, shuffle=True,
// seed=seed, drop_last=drop_last) after set_epoch(e), whose order is
// torch.randperm(n, generator=torch.Generator().manual_seed(seed + e)); only (seed + e) mod 2^32
// matters. tests/engine/data/golden/ holds torch's lists. As in PyTorch, call set_epoch(epoch)
// before each epoch, or every epoch visits the same order.
//
// Threading contract: not thread-safe (set_epoch writes); see sampler.h.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/dataset.h"
#include "engine/data/sampler.h"

namespace dpe {

class DistributedSampler : public Sampler {
 public:
  // Throws dpe::Error when dataset_size < 0, num_replicas < 1 or rank is not in
  // [0, num_replicas - 1].
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false);
  DistributedSampler(const Dataset& dataset, int num_replicas, int rank, bool shuffle = true,
                     uint64_t seed = 0, bool drop_last = false)
      : DistributedSampler(dataset.size(), num_replicas, rank, shuffle, seed, drop_last) {}

  // num_samples: the indices this rank visits per epoch.
  int64_t size() const override { return num_samples_; }
  std::vector<int64_t> indices() const override;
  void set_epoch(int64_t epoch) override { epoch_ = epoch; }

  int64_t epoch() const { return epoch_; }
  int64_t total_size() const { return num_samples_ * num_replicas_; }
  int num_replicas() const { return num_replicas_; }
  int rank() const { return rank_; }

 private:
  int64_t n_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t num_samples_;
  int64_t epoch_ = 0;
};

}  // namespace dpe
