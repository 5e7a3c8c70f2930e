#include "engine/nn/flatten.h"

#include "engine/autograd/ops.h"

namespace dpe::nn {

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, start_dim_); }

}  // namespace dpe::nn
