// Attention ops: the (causal) softmax over the last dim and scaled dot-product attention built
// from bmm, softmax and dropout.
#include <cmath>

#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::like;
using detail::prepare;

Tensor softmax(const Tensor& x_in, bool causal) {
  if (autocast_detail::applies(x_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return softmax(autocast_detail::float32(x_in), causal);
  }
  Tensor x = prepare("softmax", x_in, x_in, "input");
  DPE_CHECK(x.dim() >= (causal ? 2 : 1), "softmax: expected an input of at least "
                                             << (causal ? 2 : 1) << " dimensions"
                                             << (causal ? " [..., Tq, Tk] for a causal mask" : "")
                                             << ", got " << x.shape());
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  dispatch(prim::SoftmaxForward{x, causal, y});
  Tensor saved = y.detach();
  record("softmax", {x_in}, {&y},
         [saved](const std::vector<Tensor>& g) {
           Tensor gx = like(saved);
           dispatch(prim::SoftmaxBackward{saved, g[0].contiguous(), gx});
           return std::vector<Tensor>{gx};
         },
         {saved});
  return y;
}

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v, bool causal,
                                    float dropout_p, uint64_t seed) {
  const char* op = "scaled_dot_product_attention";
  DPE_CHECK(q.defined() && k.defined() && v.defined(), op << ": q, k or v is undefined");
  DPE_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(0) == k.size(0) &&
                q.size(0) == v.size(0) && q.size(1) == k.size(1) && q.size(1) == v.size(1) &&
                q.size(3) == k.size(3) && k.size(2) == v.size(2),
            op << ": expected q [B, H, Tq, E], k [B, H, Tk, E] and v [B, H, Tk, Ev], got q "
               << q.shape() << ", k " << k.shape() << " and v " << v.shape());
  const int64_t b = q.size(0), h = q.size(1), tq = q.size(2), tk = k.size(2), e = q.size(3),
                ev = v.size(3);
  // The scale goes on q (B*H*Tq*E multiplies) rather than on the scores (B*H*Tq*Tk).
  Tensor q3 = mul_scalar(reshape(q, Shape{b * h, tq, e}), 1.0f / std::sqrt(static_cast<float>(e)));
  Tensor scores = bmm(q3, reshape(k, Shape{b * h, tk, e}), false, true);
  Tensor att = softmax(scores, causal);
  if (dropout_p > 0.0f) att = dropout(att, dropout_p, true, seed);
  Tensor out = bmm(att, reshape(v, Shape{b * h, tk, ev}));
  return reshape(out, Shape{b, h, tq, ev});
}

}  // namespace dpe::ops
