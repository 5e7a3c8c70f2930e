// Conv2d: PyTorch's nn.Conv2d (square kernel, stride, padding) with its default initialisation.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

class Conv2d : public Cloneable<Conv2d> {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Generator& gen,
         int64_t stride = 1, int64_t padding = 0, bool bias = true, Device device = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;

 private:
  int64_t in_, out_, kernel_;
  int64_t stride_, padding_;
  bool bias_;
};

}  // namespace dpe::nn
