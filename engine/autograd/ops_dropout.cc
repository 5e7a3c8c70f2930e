// Dropout: the input times a mask that is a function of its seed.
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::like;
using detail::prepare;

Tensor dropout(const Tensor& x_in, float p, bool training, uint64_t seed) {
  DPE_CHECK(p >= 0.0f && p <= 1.0f, "dropout probability has to be between 0 and 1, but got " << p);
  if (!training || p == 0.0f) return x_in;
  Tensor x = prepare("dropout", x_in, x_in, "input");
  DeviceGuard guard(&x.context());
  Tensor mask = like(x);
  dispatch(prim::DropoutMask{p, seed, mask});
  return mul(x_in, mask);
}

}  // namespace dpe::ops
