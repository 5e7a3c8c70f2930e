// AdaptiveAvgPool2d: PyTorch's nn.AdaptiveAvgPool2d for output size (1, 1) only, the global
// average pool of ResNet's head. No backend has a slot for it, so it is a reshape and a matmul.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include <string>

#include "engine/nn/module.h"

namespace dpe::nn {

class AdaptiveAvgPool2d : public Cloneable<AdaptiveAvgPool2d> {
 public:
  // The output (H, W); anything but (1, 1) throws dpe::Error.
  explicit AdaptiveAvgPool2d(int64_t output_size = 1)
      : AdaptiveAvgPool2d(output_size, output_size) {}
  AdaptiveAvgPool2d(int64_t output_h, int64_t output_w);
  // [N, C, H, W] -> [N, C, 1, 1] (or [C, H, W] -> [C, 1, 1]), each plane's mean; H, W >= 1.
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "AdaptiveAvgPool2d(output_size=(1, 1))"; }
};

}  // namespace dpe::nn
