#include "engine/nn/pooling.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

// PyTorch's stride defaults to kernel_size.
MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding)
    : kernel_(kernel_size), stride_(stride > 0 ? stride : kernel_size), padding_(padding) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  return ops::max_pool2d(x, kernel_, stride_, padding_);
}

std::string MaxPool2d::repr() const {
  return "MaxPool2d(kernel_size=" + std::to_string(kernel_) +
         ", stride=" + std::to_string(stride_) + ", padding=" + std::to_string(padding_) + ")";
}

}  // namespace dpe::nn
