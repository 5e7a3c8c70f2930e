#include "engine/nn/activation.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

}  // namespace dpe::nn
