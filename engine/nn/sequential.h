// Sequential: children "0", "1", ... applied in order, as PyTorch's nn.Sequential. A BatchNorm2d
// followed by a ReLU runs as one fused op (engine/nn/fusion.h), with the same results.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include <memory>
#include <vector>

#include "engine/nn/module.h"

namespace dpe::nn {

class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<Module>> layers);
  void push_back(std::shared_ptr<Module> layer);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  size_t size() const { return named_children().size(); }
};

}  // namespace dpe::nn
