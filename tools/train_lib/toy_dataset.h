// ToyDataset: seed 004's toy regression for ToyModel — inputs of 10 normals, targets of 5 values
// from a fixed random linear map plus a little noise, so the loss has something to learn.
#pragma once

#include "engine/data/dataset.h"

namespace dpe::tools {

class ToyDataset : public Dataset {
 public:
  ToyDataset(int64_t length, uint64_t seed);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  Tensor inputs_, targets_;
};

}  // namespace dpe::tools
