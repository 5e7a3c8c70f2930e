// Mlp: Flatten - Linear(784, 512) - ReLU - Linear(512, 512) - ReLU - Linear(512, 10), for
// Fashion-MNIST images [N, 1, 28, 28] (or already flat [N, 784]).
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

class Mlp : public Cloneable<Mlp> {
 public:
  explicit Mlp(Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "Mlp"; }
};

}  // namespace dpe::models
