// Pooling layers: MaxPool2d.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"

namespace dpe::nn {

class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  // stride 0 means "the kernel size", PyTorch's default.
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  int64_t kernel_size() const { return kernel_; }
  int64_t stride() const { return stride_; }
  int64_t padding() const { return padding_; }

 private:
  int64_t kernel_, stride_, padding_;
};

}  // namespace dpe::nn
