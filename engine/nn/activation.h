// Element-wise activations: ReLU.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"

namespace dpe::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "ReLU()"; }
};

}  // namespace dpe::nn
