#include "engine/data/random_dataset.h"

#include <cstring>

#include "engine/core/error.h"
#include "engine/tensor/random.h"

namespace dpe {

RandomDataset::RandomDataset(int64_t size, int64_t length, uint64_t seed)
    : sample_size_(size), length_(length) {
  DPE_CHECK(size >= 0 && length >= 0, "RandomDataset: size and length must be non-negative, got "
                                          << size << " and " << length);
  Generator gen(seed);
  data_ = randn(Shape{length, size}, gen);
}

Example RandomDataset::get(int64_t index) const {
  check_index("RandomDataset", index);
  return Example{data_.narrow(0, index, 1).view(Shape{sample_size_}), Tensor()};
}

Batch RandomDataset::get_batch(const std::vector<int64_t>& indices) const {
  DPE_CHECK(!indices.empty(), "RandomDataset::get_batch: empty list of indices");
  const int64_t b = static_cast<int64_t>(indices.size());
  Tensor out = Tensor::empty(Shape{b, sample_size_});
  const size_t row = static_cast<size_t>(sample_size_) * sizeof(float);
  const float* src = data_.data<float>();
  float* dst = out.data<float>();
  for (int64_t i = 0; i < b; ++i) {
    check_index("RandomDataset::get_batch", indices[i]);
    if (row > 0) std::memcpy(dst + i * sample_size_, src + indices[i] * sample_size_, row);
  }
  return Batch{out, Tensor()};
}

}  // namespace dpe
