#include "engine/nn/pooling.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding) {
  params_.kernel = kernel_size;
  params_.stride = stride > 0 ? stride : kernel_size;  // PyTorch: stride defaults to kernel_size
  params_.padding = padding;
}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, params_); }

std::string MaxPool2d::repr() const {
  return "MaxPool2d(kernel_size=" + std::to_string(params_.kernel) +
         ", stride=" + std::to_string(params_.stride) +
         ", padding=" + std::to_string(params_.padding) + ")";
}

}  // namespace dpe::nn
