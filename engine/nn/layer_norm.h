// LayerNorm over the last dim, PyTorch's nn.LayerNorm(normalized_shape=(D,)): parameters "weight"
// (ones) and "bias" (zeros) when elementwise_affine, no buffers, the same in train and eval.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
#pragma once

#include "engine/nn/module.h"

namespace dpe::nn {

class LayerNorm : public Cloneable<LayerNorm> {
 public:
  explicit LayerNorm(int64_t normalized_shape, float eps = 1e-5f, bool elementwise_affine = true,
                     Device device = {});
  Tensor forward(const Tensor& x) override;
  // "LayerNorm((768,), eps=1e-05, elementwise_affine=True)", as PyTorch prints it.
  std::string repr() const override;

 private:
  int64_t d_;
  float eps_;
  bool affine_;
};

}  // namespace dpe::nn
