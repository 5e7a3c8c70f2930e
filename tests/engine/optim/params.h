// Parameters with hand-set gradients, for checking optimizer updates against torch.optim's
// formulas evaluated by hand in double.
#pragma once

#include <vector>

#include "engine/tensor/tensor.h"

namespace dpe::optim::testing {

inline Tensor param(std::vector<float> v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.requires_grad_();
  return p;
}

inline void set_grad(Tensor& p, std::vector<float> g) {
  p.set_grad(Tensor::from_vector(g, p.shape(), p.device()));
}

}  // namespace dpe::optim::testing
