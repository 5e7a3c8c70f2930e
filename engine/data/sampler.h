// Sampler: the order in which a DataLoader visits a dataset's indices, one list per epoch
// (PyTorch's torch.utils.data.Sampler). Implementations: SequentialSampler, RandomSampler,
// DistributedSampler; BatchSampler groups any of them into batches.
//
// Threading contract: a sampler is not thread-safe; call set_epoch() and indices() from one
// thread at a time. DataLoader calls indices() on the caller's thread when a pass starts, never
// from its prefetch thread.
#pragma once

#include <cstdint>
#include <vector>

namespace dpe {

class Sampler {
 public:
  virtual ~Sampler() = default;

  // len(sampler): the number of indices indices() returns.
  virtual int64_t size() const = 0;
  // The indices of the current epoch, in visiting order. The same epoch always gives the same
  // list, so a pass can be repeated and every rank of a job agrees on it.
  virtual std::vector<int64_t> indices() const = 0;
  // Selects the epoch whose order indices() returns; samplers that do not shuffle ignore it.
  virtual void set_epoch(int64_t epoch) { (void)epoch; }
};

}  // namespace dpe
