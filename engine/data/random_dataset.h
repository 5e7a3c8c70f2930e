// RandomDataset: the seeds' `RandomDataset(size, length)`, `length` samples of `size` standard
// normal values drawn once, from a seeded Generator, at construction. Samples have no target.
//
// Threading contract: immutable after construction; every method may be called from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/data/dataset.h"

namespace dpe {

class RandomDataset : public Dataset {
 public:
  // As in the seeds: RandomDataset(input_size, data_size). The same seed gives the same data.
  RandomDataset(int64_t size, int64_t length, uint64_t seed = 0);

  int64_t size() const override { return length_; }
  // input: float32 [size], a view of the dataset's data (like PyTorch's self.data[index]);
  // target: undefined.
  Example get(int64_t index) const override;
  // input: float32 [B, size], gathered in one pass; target: undefined.
  Batch get_batch(const std::vector<int64_t>& indices) const override;

  // All samples, float32 [length, size] on host:0.
  const Tensor& data() const { return data_; }

 private:
  int64_t sample_size_;
  int64_t length_;
  Tensor data_;
};

}  // namespace dpe
