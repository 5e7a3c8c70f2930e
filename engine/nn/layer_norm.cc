#include "engine/nn/layer_norm.h"

#include <cstdio>

#include "engine/autograd/ops.h"

namespace dpe::nn {

LayerNorm::LayerNorm(int64_t normalized_shape, float eps, bool elementwise_affine, Device device)
    : d_(normalized_shape), eps_(eps), affine_(elementwise_affine) {
  if (affine_) {
    register_parameter("weight", Tensor::ones({d_}, device));
    register_parameter("bias", Tensor::zeros({d_}, DType::kFloat32, device));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  if (!affine_) return ops::layer_norm(x, Tensor(), Tensor(), eps_, repr());
  return ops::layer_norm(x, param("weight"), param("bias"), eps_, repr());
}

std::string LayerNorm::repr() const {
  // Python prints 1e-05 where C's %g gives 1e-05 too; both use two exponent digits at least.
  char buf[96];
  std::snprintf(buf, sizeof buf, "LayerNorm((%lld,), eps=%g, elementwise_affine=%s)",
                static_cast<long long>(d_), eps_, affine_ ? "True" : "False");
  return buf;
}

}  // namespace dpe::nn
