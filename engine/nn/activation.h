// Element-wise activations: ReLU, GELU (tanh form).
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

// PyTorch's nn.GELU(approximate='tanh'), the form GPT-2 uses; the exact (erf) form is not built.
class GELU : public Cloneable<GELU> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "GELU(approximate='tanh')"; }
};

}  // namespace dpe::nn
