#include "engine/data/distributed_sampler.h"

#include <numeric>

#include "engine/core/error.h"
#include "engine/data/torch_generator.h"

namespace dpe {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       bool shuffle, uint64_t seed, bool drop_last)
    : n_(dataset_size),
      num_replicas_(num_replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed) {
  DPE_CHECK(dataset_size >= 0,
            "DistributedSampler: the dataset size must be non-negative, got " << dataset_size);
  DPE_CHECK(num_replicas >= 1,
            "DistributedSampler: num_replicas must be at least 1, got " << num_replicas);
  DPE_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: Invalid rank "
                                                  << rank << ", rank should be in the interval [0, "
                                                  << num_replicas - 1 << "]");
  const int64_t r = num_replicas;
  // With drop_last and a remainder, ceil((n - r) / r) == floor(n / r), 0 when n < r.
  num_samples_ = (drop_last && n_ % r != 0) ? n_ / r : (n_ + r - 1) / r;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    // torch: g = torch.Generator(); g.manual_seed(self.seed + self.epoch); torch.randperm(n, g).
    TorchGenerator gen(seed_ + static_cast<uint64_t>(epoch_));
    order = torch_randperm(n_, gen);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), 0);
  }
  // Padding repeats the order from its start, wrapping as often as needed: PyTorch's
  // indices += indices[:pad] and (indices * ceil(pad / n))[:pad] are both order[i % n].
  // Truncation (drop_last) keeps the first total_size entries; either way entry i is order[i % n].
  const int64_t total = total_size();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples_));
  for (int64_t i = rank_; i < total; i += num_replicas_) out.push_back(order[i % n_]);
  return out;
}

}  // namespace dpe
