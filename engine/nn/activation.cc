#include "engine/nn/activation.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

Tensor GELU::forward(const Tensor& x) { return ops::gelu(x); }

}  // namespace dpe::nn
