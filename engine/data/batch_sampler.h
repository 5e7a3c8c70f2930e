// BatchSampler: groups the indices of a Sampler into batches of batch_size, the last one smaller
// unless drop_last (PyTorch's BatchSampler(sampler, batch_size, drop_last)).
//
// Threading contract: not thread-safe (set_epoch writes to the wrapped sampler); see sampler.h.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/data/sampler.h"

namespace dpe {

class BatchSampler {
 public:
  // Throws dpe::Error when sampler is null or batch_size < 1.
  BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last);

  // len(batch_sampler): floor(n / batch_size) with drop_last, else ceil(n / batch_size).
  int64_t size() const;
  // The batches of the current epoch of the wrapped sampler.
  std::vector<std::vector<int64_t>> batches() const;
  // Forwards to the wrapped sampler.
  void set_epoch(int64_t epoch) { sampler_->set_epoch(epoch); }

 private:
  std::shared_ptr<Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

}  // namespace dpe
