#include "engine/backend/prims/conv.h"

#include "engine/core/error.h"

namespace dpe::prim {

namespace {

// The output shape [N, O, Ho, Wo] of a convolution; conv2d_shape (kernels/op_params.h) checks
// the parameters, so its messages are those of every device type.
Shape conv2d_output(const OpCheck& c, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  c.rank(x, "input", 4, activation_format(x));
  c.rank(w, "weight", 4);
  DPE_CHECK(x.size(1) == w.size(1), c.op() << ": weight of shape " << w.shape()
                                           << " expects input with " << w.size(1)
                                           << " channels, but got input of shape " << x.shape());
  const Conv2dShape s = conv2d_shape(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0),
                                     w.size(2), w.size(3), p.stride, p.padding);
  return Shape{s.n, s.o, s.ho, s.wo};
}

}  // namespace

void Conv2dForward::check(const OpCheck& c) const {
  const Shape out = conv2d_output(c, x, w, p);
  c.optional(b, "bias", Shape{w.size(0)}, "weight", w.shape());
  c.shaped(y, "output", out, "input", x.shape(), c.dtype(), activation_format(x));
}
OpCost Conv2dForward::cost() const {
  OpCost c = op_cost::make("conv", op_cost::conv2d_flops(w, y), {&x, &w, &b}, {&y});
  c.padding_flops = op_cost::conv2d_padding_flops(x, w, y, p.stride, p.padding);
  return c;
}

void Conv2dBackward::check(const OpCheck& c) const {
  const Shape out = conv2d_output(c, x, w, p);
  const MemoryFormat f = activation_format(x);
  c.shaped(gy, "grad_output", out, "input", x.shape(), c.dtype(), f);
  if (gx.defined()) c.shaped(gx, "grad_input", x.shape(), "input", x.shape(), c.dtype(), f);
  c.optional(gw, "grad_weight", w.shape(), "weight", w.shape());
  c.optional(gb, "grad_bias", Shape{w.size(0)}, "weight", w.shape());
}
bool Conv2dBackward::short_circuit() const {
  if (x.size(0) != 0) return false;
  if (gw.defined()) gw.zero_();
  if (gb.defined()) gb.zero_();
  return true;
}
OpCost Conv2dBackward::cost() const {
  const double passes = (gx.defined() ? 1 : 0) + (gw.defined() ? 1 : 0);
  OpCost c = op_cost::make(
      "conv", op_cost::conv2d_flops(w, gy) * passes + (gb.defined() ? 1.0 * gy.numel() : 0.0),
      {&x, &w, &gy}, {&gx, &gw, &gb});
  // Both gradients' products with padding are products with zeros.
  c.padding_flops = op_cost::conv2d_padding_flops(x, w, gy, p.stride, p.padding) * passes;
  return c;
}

}  // namespace dpe::prim
