// Flatten: dims start_dim.. folded into one, as PyTorch's nn.Flatten (end_dim -1).
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include <string>

#include "engine/nn/module.h"

namespace dpe::nn {

class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "Flatten(start_dim=" + std::to_string(start_dim_) + ")"; }

 private:
  int64_t start_dim_;
};

}  // namespace dpe::nn
