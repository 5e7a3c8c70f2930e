#include "engine/nn/conv2d.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
               int64_t stride, int64_t padding, bool bias, Device device)
    : in_(in_channels),
      out_(out_channels),
      kernel_(kernel_size),
      stride_(stride),
      padding_(padding),
      bias_(bias) {
  const int64_t fan_in = in_ * kernel_ * kernel_;
  register_parameter("weight", kaiming_uniform({out_, in_, kernel_, kernel_}, fan_in, gen, device));
  register_parameter("bias", bias ? kaiming_uniform({out_}, fan_in, gen, device) : Tensor());
}

Tensor Conv2d::forward(const Tensor& x) {
  return ops::conv2d(x, param("weight"), param("bias"), stride_, padding_, repr());
}

std::string Conv2d::repr() const {
  std::string k = std::to_string(kernel_);
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=(" + k +
         ", " + k + "), stride=(" + std::to_string(stride_) + ", " + std::to_string(stride_) +
         "), padding=(" + std::to_string(padding_) + ", " + std::to_string(padding_) + ")" +
         (bias_ ? "" : ", bias=False") + ")";
}

}  // namespace dpe::nn
