#include "engine/backend/prims/pool.h"

#include "engine/core/error.h"

namespace dpe::prim {

namespace {

// The output shape [N, C, Ho, Wo] of max pooling over an input [N, C, H, W] (checked by
// max_pool2d_shape, kernels/op_params.h, so its messages are those of every device type).
Shape pool2d_output(const Shape& in, const Pool2dParams& p) {
  const Pool2dShape s = max_pool2d_shape(in[0], in[1], in[2], in[3], p.kernel, p.stride, p.padding);
  return Shape{s.n, s.c, s.ho, s.wo};
}

}  // namespace

void MaxPool2dForward::check(const OpCheck& c) const {
  const MemoryFormat f = activation_format(x);
  c.rank(x, "input", 4, f);
  const Shape out = pool2d_output(x.shape(), p);
  c.shaped(y, "output", out, "input", x.shape(), DType::kFloat32, f);
  c.shaped(workspace, "indices", out, "input", x.shape(), DType::kInt64, f);
}
OpCost MaxPool2dForward::cost() const {
  return op_cost::make("pool", 1.0 * y.numel() * p.kernel * p.kernel, {&x}, {&y, &workspace});
}

void MaxPool2dBackward::check(const OpCheck& c) const {
  const MemoryFormat f = activation_format(gx);
  c.rank(gx, "grad_input", 4, f);
  const Shape out = pool2d_output(gx.shape(), p);
  c.shaped(gy, "grad_output", out, "grad_input", gx.shape(), DType::kFloat32, f);
  c.shaped(workspace, "indices", out, "grad_input", gx.shape(), DType::kInt64, f);
}
OpCost MaxPool2dBackward::cost() const {
  return op_cost::make("pool", 1.0 * gy.numel(), {&gy, &workspace}, {&gx});
}

}  // namespace dpe::prim
