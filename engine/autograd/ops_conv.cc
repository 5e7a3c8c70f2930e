// Convolution: conv2d, NCHW or channels last.
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::like;
using detail::prepare;
using detail::prepare_activation;

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, int64_t stride,
              int64_t padding, const std::string& who) {
  if (autocast_detail::applies(x_in)) {  // autocast's lower-precision list
    const autocast_detail::Running running;
    return conv2d(autocast_detail::lower(x_in), autocast_detail::lower(w_in),
                  autocast_detail::lower(b_in), stride, padding, who);
  }
  const Conv2dParams p{stride, padding};
  Tensor x = prepare_activation(who.c_str(), x_in, "input");
  Tensor w = prepare(who.c_str(), w_in, x_in, "weight");
  Tensor b = b_in.defined() ? prepare(who.c_str(), b_in, x_in, "bias") : Tensor();
  DPE_CHECK(w.dim() == 4, who << ": weight must be 4-D [out, in, kh, kw], got " << w.shape());
  DPE_CHECK(x.dim() == 4 && x.size(1) == w.size(1), who << ": expected input [N, " << w.size(1)
                                                        << ", H, W] for weight " << w.shape()
                                                        << ", got " << x.shape());
  const int64_t ho = (x.size(2) + 2 * p.padding - w.size(2)) / p.stride + 1;
  const int64_t wo = (x.size(3) + 2 * p.padding - w.size(3)) / p.stride + 1;
  DPE_CHECK(ho > 0 && wo > 0, who << ": input " << x.shape() << " is smaller than the kernel "
                                  << w.shape() << " with padding " << p.padding);
  DeviceGuard guard(&x.context());
  const MemoryFormat format = prim::activation_format(x);
  Tensor y =
      Tensor::empty(Shape{x.size(0), w.size(0), ho, wo}, x.dtype(), x.device(), format);
  dispatch(prim::Conv2dForward{x, w, b, p, y});
  record(who, {x_in, w_in, b_in}, {&y},
         [x, w, p, x_in, w_in, b_in, format](const std::vector<Tensor>& g) {
           Tensor gx = x_in.requires_grad() ? like(x) : Tensor();
           Tensor gw = w_in.requires_grad() ? like(w) : Tensor();
           Tensor gb = b_in.requires_grad() ? like(b_in) : Tensor();
           dispatch(prim::Conv2dBackward{x, w, g[0].contiguous(format), p, gx, gw, gb});
           return std::vector<Tensor>{gx, gw, gb};
         },
         {x, w});
  return y;
}

}  // namespace dpe::ops
