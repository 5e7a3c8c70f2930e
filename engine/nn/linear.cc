#include "engine/nn/linear.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Generator& gen, bool bias, Device device)
    : in_(in_features), out_(out_features), bias_(bias) {
  register_parameter("weight", kaiming_uniform({out_, in_}, in_, gen, device));
  register_parameter("bias", bias ? kaiming_uniform({out_}, in_, gen, device) : Tensor());
}

Tensor Linear::forward(const Tensor& x) {
  return ops::linear(x, param("weight"), param("bias"), repr());
}

std::string Linear::repr() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (bias_ ? "True" : "False") + ")";
}

}  // namespace dpe::nn
