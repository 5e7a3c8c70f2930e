// ConvNet: seed 003's Fashion-MNIST network,
//   layer1: Conv(1, 16, 5, pad 2) - BN - ReLU - MaxPool(2)
//   layer2: Conv(16, 32, 5, pad 2) - BN - ReLU - MaxPool(2)
//   fc: Linear(7 * 7 * 32 = 1568, 10).
// `batch_norm = false` drops the BN layers (for exact DataParallel/DDP equivalence tests).
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

class ConvNet : public Cloneable<ConvNet> {
 public:
  explicit ConvNet(Generator& gen, bool batch_norm = true, int64_t num_classes = 10);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "ConvNet"; }
};

}  // namespace dpe::models
