// Linear: y = x W^T + b, PyTorch's nn.Linear with its default initialisation.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

class Linear : public Cloneable<Linear> {
 public:
  Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias = true,
         Device device = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  const Tensor& weight() const { return param("weight"); }

 private:
  int64_t in_, out_;
  bool bias_;
};

}  // namespace dpe::nn
