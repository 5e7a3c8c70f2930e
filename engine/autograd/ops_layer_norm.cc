// Layer norm over the last dim.
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::like;
using detail::prepare;

Tensor layer_norm(const Tensor& x_in, const Tensor& gamma_in, const Tensor& beta_in, float eps,
                  const std::string& who) {
  if (autocast_detail::applies(x_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return layer_norm(autocast_detail::float32(x_in), autocast_detail::float32(gamma_in),
                      autocast_detail::float32(beta_in), eps, who);
  }
  Tensor x = prepare(who.c_str(), x_in, x_in, "input");
  Tensor gamma = gamma_in.defined() ? prepare(who.c_str(), gamma_in, x_in, "weight") : Tensor();
  Tensor beta = beta_in.defined() ? prepare(who.c_str(), beta_in, x_in, "bias") : Tensor();
  DPE_CHECK(x.dim() >= 1 && x.size(-1) > 0,
            who << ": expected an input [..., D] with D > 0, got " << x.shape());
  const int64_t d = x.size(-1);
  DPE_CHECK((!gamma.defined() || gamma.shape() == Shape({d})) &&
                (!beta.defined() || beta.shape() == Shape({d})),
            who << ": expected weight and bias of shape [" << d << "] for input " << x.shape()
                << ", got " << (gamma.defined() ? gamma.shape() : Shape{}) << " and "
                << (beta.defined() ? beta.shape() : Shape{}));
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  Tensor mean = Tensor::empty(Shape{x.numel() / d}, DType::kFloat32, x.device());
  Tensor rstd = like(mean);
  dispatch(prim::LayerNormForward{x, gamma, beta, eps, y, mean, rstd});
  record(who, {x_in, gamma_in, beta_in}, {&y},
         [x, gamma, mean, rstd, gamma_in, beta_in](const std::vector<Tensor>& g) {
           Tensor gx = like(x);
           Tensor ggamma = gamma_in.requires_grad() ? like(gamma) : Tensor();
           Tensor gbeta = beta_in.requires_grad() ? like(beta_in) : Tensor();
           dispatch(
               prim::LayerNormBackward{x, g[0].contiguous(), gamma, mean, rstd, gx, ggamma, gbeta});
           return std::vector<Tensor>{gx, ggamma, gbeta};
         },
         {x, gamma});
  return y;
}

}  // namespace dpe::ops
