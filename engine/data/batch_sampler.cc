#include "engine/data/batch_sampler.h"

#include <algorithm>

#include "engine/core/error.h"

namespace dpe {

BatchSampler::BatchSampler(std::shared_ptr<Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  DPE_CHECK(sampler_ != nullptr, "BatchSampler: sampler is null");
  DPE_CHECK(batch_size >= 1,
            "BatchSampler: batch_size should be a positive integer value, but got batch_size="
                << batch_size);
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

std::vector<std::vector<int64_t>> BatchSampler::batches() const {
  const std::vector<int64_t> all = sampler_->indices();
  std::vector<std::vector<int64_t>> out;
  out.reserve(static_cast<size_t>(size()));
  const size_t bs = static_cast<size_t>(batch_size_);
  for (size_t begin = 0; begin < all.size(); begin += bs) {
    const size_t end = std::min(all.size(), begin + bs);
    if (drop_last_ && end - begin < bs) break;
    out.emplace_back(all.begin() + begin, all.begin() + end);
  }
  return out;
}

}  // namespace dpe
