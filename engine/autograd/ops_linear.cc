// Matrix products: matmul, bmm and linear (a GEMM with its bias, writing its parameter gradients
// where they are offered).
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::like;
using detail::prepare;

Tensor bmm(const Tensor& a_in, const Tensor& b_in, bool trans_a, bool trans_b) {
  if (autocast_detail::applies(a_in)) {  // autocast's lower-precision list
    const autocast_detail::Running running;
    return bmm(autocast_detail::lower(a_in), autocast_detail::lower(b_in), trans_a, trans_b);
  }
  Tensor a = prepare("bmm", a_in, a_in, "batch1");
  Tensor b = prepare("bmm", b_in, a_in, "batch2");
  DPE_CHECK(a.dim() == 3 && b.dim() == 3 && a.size(0) == b.size(0) &&
                a.size(trans_a ? 1 : 2) == b.size(trans_b ? 2 : 1),
            "bmm: batch1 " << a.shape() << (trans_a ? " (transposed)" : "") << " and batch2 "
                           << b.shape() << (trans_b ? " (transposed)" : "")
                           << " cannot be multiplied");
  DeviceGuard guard(&a.context());
  Tensor c = Tensor::empty(Shape{a.size(0), a.size(trans_a ? 2 : 1), b.size(trans_b ? 1 : 2)},
                           a.dtype(), a.device());
  dispatch(prim::Bmm{a, b, trans_a, trans_b, c});
  record("bmm", {a_in, b_in}, {&c},
         [a, b, a_in, b_in, trans_a, trans_b](const std::vector<Tensor>& g) {
           // c = op(a) op(b): gop(a) = gc op(b)^T and gop(b) = op(a)^T gc, each written in the
           // layout its operand is held in by choosing which factor goes first and the flags.
           Tensor gc = g[0].contiguous();
           Tensor ga, gb;
           if (a_in.requires_grad()) {
             ga = like(a);
             if (!trans_a) {
               dispatch(prim::Bmm{gc, b, false, !trans_b, ga});
             } else {
               dispatch(prim::Bmm{b, gc, trans_b, true, ga});
             }
           }
           if (b_in.requires_grad()) {
             gb = like(b);
             if (!trans_b) {
               dispatch(prim::Bmm{a, gc, !trans_a, false, gb});
             } else {
               dispatch(prim::Bmm{gc, a, true, trans_a, gb});
             }
           }
           return std::vector<Tensor>{ga, gb};
         },
         {a, b});
  return c;
}

namespace {

// [..., M, K] @ [..., K, N] with equal leading dims: one bmm over the folded batch.
Tensor batched_matmul(const Tensor& a, const Tensor& b) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  bool lead_equal = sa.rank() == sb.rank();
  for (int64_t i = 0; lead_equal && i + 2 < sa.rank(); ++i) lead_equal = sa[i] == sb[i];
  DPE_CHECK(lead_equal && sa[sa.rank() - 1] == sb[sb.rank() - 2],
            "matmul: shapes " << sa << " and " << sb
                              << " cannot be multiplied (batched matmul needs [..., M, K] and "
                                 "[..., K, N] with equal leading dims)");
  const int64_t m = sa[sa.rank() - 2], k = sa[sa.rank() - 1], n = sb[sb.rank() - 1];
  std::vector<int64_t> out(sa.begin(), sa.end() - 2);
  int64_t folded = 1;
  for (int64_t d : out) folded *= d;
  out.push_back(m);
  out.push_back(n);
  Tensor c = bmm(reshape(a, Shape{folded, m, k}), reshape(b, Shape{folded, k, n}));
  return reshape(c, Shape(out));
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (autocast_detail::applies(a_in)) {  // autocast's lower-precision list
    const autocast_detail::Running running;
    return matmul(autocast_detail::lower(a_in), autocast_detail::lower(b_in));
  }
  if (a_in.defined() && b_in.defined() && (a_in.dim() > 2 || b_in.dim() > 2)) {
    return batched_matmul(a_in, b_in);
  }
  Tensor a = prepare("matmul", a_in, a_in, "a");
  Tensor b = prepare("matmul", b_in, a_in, "b");
  DPE_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
            "matmul: mat1 and mat2 shapes cannot be multiplied (" << a.shape() << " and "
                                                                  << b.shape() << ")");
  DeviceGuard guard(&a.context());
  Tensor c = Tensor::empty(Shape{a.size(0), b.size(1)}, a.dtype(), a.device());
  dispatch(prim::Matmul{a, b, c});
  record("matmul", {a_in, b_in}, {&c},
         [a, b, a_in, b_in](const std::vector<Tensor>& g) {
           Tensor gc = g[0].contiguous();
           Tensor ga, gb;
           if (a_in.requires_grad()) {  // gA = gC @ B^T
             ga = like(a);
             dispatch(prim::Matmul{gc, b.permute({1, 0}).contiguous(), ga});
           }
           if (b_in.requires_grad()) {  // gB = A^T @ gC
             gb = like(b);
             dispatch(prim::Matmul{a.permute({1, 0}).contiguous(), gc, gb});
           }
           return std::vector<Tensor>{ga, gb};
         },
         {a, b});
  return c;
}

namespace {

// A weight [out, in] that is the transpose of a dense [in, out] matrix (GPT-2's Conv1D passes
// W.t()): linear runs on it as it is stored.
bool dense_transpose(const Tensor& w) {
  return w.dim() == 2 && w.size(0) > 1 && w.size(1) > 1 && w.strides()[0] == 1 &&
         w.strides()[1] == w.size(0);
}

}  // namespace

Tensor linear(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const std::string& who) {
  if (autocast_detail::applies(x_in)) {  // autocast's lower-precision list
    const autocast_detail::Running running;
    return linear(autocast_detail::lower(x_in), autocast_detail::lower(w_in),
                  autocast_detail::lower(b_in), who);
  }
  Tensor x = prepare(who.c_str(), x_in, x_in, "input");
  // A transposed weight runs as stored (prim::LinearForward::w_transposed): no transposed copy of
  // it each forward, and its gradient is made [in, out], so that the transpose's backward hands
  // the parameter a dense gradient to keep rather than one to copy.
  DPE_CHECK(w_in.defined(), who << ": weight is undefined");
  const bool transposed = dense_transpose(w_in);
  Tensor w = prepare(who.c_str(), transposed ? w_in.permute({1, 0}) : w_in, x_in, "weight");
  Tensor b = b_in.defined() ? prepare(who.c_str(), b_in, x_in, "bias") : Tensor();
  const int64_t in = w.size(transposed ? 0 : 1), out = w.size(transposed ? 1 : 0);
  DPE_CHECK(x.dim() == 2 && w.dim() == 2 && x.size(1) == in,
            who << ": expected input of shape [N, " << in << "] for weight " << w_in.shape()
                << ", got " << x.shape());
  DeviceGuard guard(&x.context());
  Tensor y = Tensor::empty(Shape{x.size(0), out}, x.dtype(), x.device());
  dispatch(prim::LinearForward{x, w, b, y, transposed});
  record(who, {x_in, w_in, b_in}, {&y},
         [x, w, x_in, w_in, b_in, transposed](const std::vector<Tensor>& g) {
           // The weight's and bias's gradients go straight to the destinations offered for them
           // (design note "gradient destinations", node.h), scaled; a parameter without an
           // offer of that scale gets its plain gradient, from a call of its own if need be. A
           // transposed weight's offer (laid out [out, in]) is declined.
           // An offer of another dtype (a float32 bucket for a bfloat16 product) is declined.
           const auto offer = [&](int i, const Tensor& t) -> const GradDestination* {
             const GradDestination* d = offered_destination(i);
             return d != nullptr && d->view.dtype() == t.dtype() ? d : nullptr;
           };
           const GradDestination* dw =
               w_in.requires_grad() && !transposed ? offer(1, w) : nullptr;
           const GradDestination* db = b_in.requires_grad() ? offer(2, b_in) : nullptr;
           const float scale = dw != nullptr ? dw->scale : db != nullptr ? db->scale : 1.0f;
           const bool w_there = dw != nullptr, b_there = db != nullptr && db->scale == scale;
           Tensor gx = x_in.requires_grad() ? like(x) : Tensor();
           Tensor gw = w_there ? dw->view : w_in.requires_grad() ? like(w) : Tensor();
           Tensor gb = b_there ? db->view : b_in.requires_grad() ? like(b_in) : Tensor();
           const Tensor gy = g[0].contiguous();
           const bool plain_w = gw.defined() && !w_there, plain_b = gb.defined() && !b_there;
           if (scale == 1.0f || (!plain_w && !plain_b)) {
             dispatch(prim::LinearBackward{x, w, gy, gx, gw, gb, scale, transposed});
           } else {
             Tensor sw = w_there ? gw : Tensor(), sb = b_there ? gb : Tensor();
             Tensor pw = plain_w ? gw : Tensor(), pb = plain_b ? gb : Tensor(), none;
             dispatch(prim::LinearBackward{x, w, gy, gx, sw, sb, scale, transposed});
             dispatch(prim::LinearBackward{x, w, gy, none, pw, pb, 1.0f, transposed});
           }
           if (transposed && gw.defined()) gw = gw.permute({1, 0});
           return std::vector<Tensor>{gx, gw, gb};
         },
         {x, w});
  return y;
}

}  // namespace dpe::ops
