// Elementwise ops and reductions.
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::dense_view;
using detail::like;
using detail::prepare;

namespace {

// PyTorch's type promotion for a binary op: a 16-bit float with float32 (or bfloat16 with
// float16) computes in float32, through differentiable casts. Other pairs are left to the checks.
std::array<Tensor, 2> promoted(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.dtype() == b.dtype() ||
      !is_floating_point(a.dtype()) || !is_floating_point(b.dtype())) {
    return {a, b};
  }
  const DType t = promote_types(a.dtype(), b.dtype());
  return {to(a, t), to(b, t)};
}

// a + alpha * b, differentiable.
Tensor add_scaled(const char* op, const Tensor& a_arg, const Tensor& b_arg, float alpha) {
  DPE_CHECK(b_arg.defined(), op << ": b is undefined");
  const auto [a_in, b_in] = promoted(a_arg, b_arg);
  auto [a, b] = detail::prepare_pair(op, a_in, b_in);
  DeviceGuard guard(&a.context());
  Tensor out = like(a);
  Tensor ad = dense_view(a), bd = dense_view(b), od = dense_view(out);
  dispatch(prim::Add{ad, bd, alpha, od});
  record(op, {a_in, b_in}, {&out}, [alpha, a_in, b_in](const std::vector<Tensor>& g) {
    Tensor gb;
    if (b_in.requires_grad()) {
      if (alpha == 1.0f) {
        gb = g[0];
      } else {
        const Tensor gy = g[0].contiguous(prim::activation_format(g[0]));
        gb = like(gy);
        Tensor gyd = dense_view(gy), gbd = dense_view(gb);
        dispatch(prim::Scale{gyd, alpha, gbd});
      }
    }
    return std::vector<Tensor>{a_in.requires_grad() ? g[0] : Tensor(), gb};
  });
  return out;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return add_scaled("add", a, b, 1.0f); }
Tensor sub(const Tensor& a, const Tensor& b) { return add_scaled("sub", a, b, -1.0f); }

Tensor mul(const Tensor& a_arg, const Tensor& b_arg) {
  const auto [a_in, b_in] = promoted(a_arg, b_arg);
  Tensor a = prepare("mul", a_in, a_in, "a");
  Tensor b = prepare("mul", b_in, a_in, "b");
  detail::check_same_shape("mul", a, b);
  DeviceGuard guard(&a.context());
  Tensor out = like(a);
  dispatch(prim::Mul{a, b, out});
  record("mul", {a_in, b_in}, {&out},
         [a, b, a_in, b_in](const std::vector<Tensor>& g) {
           Tensor ga, gb;
           if (a_in.requires_grad()) {
             ga = like(a);
             dispatch(prim::Mul{g[0], b, ga});
           }
           if (b_in.requires_grad()) {
             gb = like(b);
             dispatch(prim::Mul{g[0], a, gb});
           }
           return std::vector<Tensor>{ga, gb};
         },
         {a, b});
  return out;
}

Tensor mul_scalar(const Tensor& a_in, float s) {
  Tensor a = prepare("mul_scalar", a_in, a_in, "input");
  DeviceGuard guard(&a.context());
  Tensor out = like(a);
  dispatch(prim::Scale{a, s, out});
  record("mul_scalar", {a_in}, {&out}, [s](const std::vector<Tensor>& g) {
    Tensor ga = like(g[0]);
    dispatch(prim::Scale{g[0], s, ga});
    return std::vector<Tensor>{ga};
  });
  return out;
}

Tensor relu(const Tensor& x_in) {
  // A channels-last activation stays so (the ReLU between a batch norm and a pooling, unfused).
  Tensor x = detail::prepare_activation("relu", x_in, "input");
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  Tensor xd = dense_view(x), yd = dense_view(y);
  dispatch(prim::ReluForward{xd, yd});
  Tensor saved = y.detach();
  record("relu", {x_in}, {&y},
         [saved](const std::vector<Tensor>& g) {
           Tensor gx = like(saved);
           const Tensor gy = g[0].contiguous(prim::activation_format(saved));
           Tensor sd = dense_view(saved), gyd = dense_view(gy), gxd = dense_view(gx);
           dispatch(prim::ReluBackward{sd, gyd, gxd});
           return std::vector<Tensor>{gx};
         },
         {saved});
  return y;
}

Tensor gelu(const Tensor& x_in) {
  Tensor x = prepare("gelu", x_in, x_in, "input");
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  dispatch(prim::GeluForward{x, y});
  record("gelu", {x_in}, {&y},
         [x](const std::vector<Tensor>& g) {
           Tensor gx = like(x);
           dispatch(prim::GeluBackward{x, g[0].contiguous(), gx});
           return std::vector<Tensor>{gx};
         },
         {x});
  return y;
}

Tensor sum(const Tensor& x_in) {
  if (autocast_detail::applies(x_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return sum(autocast_detail::float32(x_in));
  }
  Tensor x = prepare("sum", x_in, x_in, "input");
  DeviceGuard guard(&x.context());
  Tensor out = Tensor::empty(Shape{}, DType::kFloat32, x.device());
  dispatch(prim::SumAll{x, out});
  const Shape shape = x.shape();
  record("sum", {x_in}, {&out}, [shape](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{Tensor::full(shape, g[0].item(), g[0].device())};
  });
  return out;
}

Tensor mean(const Tensor& x) {
  DPE_CHECK(x.defined() && x.numel() > 0, "mean: the input is empty");
  return mul_scalar(sum(x), 1.0f / static_cast<float>(x.numel()));
}

Tensor argmax_rows(const Tensor& x_in) {
  Tensor x = prepare("argmax", x_in, x_in, "input");
  DPE_CHECK(x.dim() == 2, "argmax: expected a 2-D input [N, C], got " << x.shape());
  DeviceGuard guard(&x.context());
  Tensor out = Tensor::empty(Shape{x.size(0)}, DType::kInt64, x.device());
  dispatch(prim::ArgmaxRows{x, out});
  return out;
}

bool all_finite(const Tensor& x_in) {
  Tensor x = prepare("all_finite", x_in, x_in, "input");
  DeviceGuard guard(&x.context());
  return dispatch(prim::AllFinite{x});
}

}  // namespace dpe::ops
