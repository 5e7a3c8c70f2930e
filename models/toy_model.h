// ToyModel: seed 004's Linear(10, 10) - ReLU - Linear(10, 5).
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::models {

class ToyModel : public Cloneable<ToyModel> {
 public:
  explicit ToyModel(Generator& gen);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "ToyModel"; }
};

}  // namespace dpe::models
