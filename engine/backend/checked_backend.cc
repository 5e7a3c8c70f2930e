// The validating front of every backend, and backend_for(): the argument checks of every op,
// written once for all device types (the messages name the op, the devices and the shapes, as
// torch's do), then the device type's slot. See the design note in backend.h.
#include "engine/backend/backend.h"
#include "engine/backend/cuda/cuda_backend.h"
#include "engine/backend/host/host_backend.h"
#include "engine/backend/op_cost.h"
#include "engine/core/error.h"

namespace dpe {

namespace {

const char* type_name(DeviceType type) { return type == DeviceType::kCuda ? "cuda" : "host"; }

// The checks of one call: the op's name for messages and the device the call runs on, that of
// `first`, which must be defined and of the backend's device type. The checks throw dpe::Error
// naming the op.
class Args {
 public:
  Args(const char* op, const Tensor& first, DeviceType type) : op_(op) {
    DPE_CHECK(first.defined(), op << ": the first tensor argument is undefined");
    device_ = first.device();
    DPE_CHECK(device_.type() == type,
              op << ": the " << type_name(type) << " backend got a tensor on " << device_);
  }

  // Defined, on this call's device, of dtype `dt`, contiguous.
  void tensor(const Tensor& t, const char* what, DType dt = DType::kFloat32) const {
    DPE_CHECK(t.defined(), op_ << ": " << what << " is an undefined tensor");
    DPE_CHECK(t.device() == device_, op_ << ": expected all tensors to be on the same device, "
                                            "but found at least two devices, "
                                         << device_ << " and " << t.device() << " (" << what
                                         << ")");
    check_dtype(op_, t, dt, what);
    DPE_CHECK(t.is_contiguous(),
              op_ << ": " << what << " of shape " << t.shape() << " must be contiguous");
  }
  // tensor() plus an exact shape; `against` names where the expected shape comes from.
  void shaped(const Tensor& t, const char* what, const Shape& want, const char* against,
              const Shape& from, DType dt = DType::kFloat32) const {
    tensor(t, what, dt);
    DPE_CHECK(t.shape() == want, op_ << ": expected " << what << " of shape " << want << " for "
                                     << against << " of shape " << from << ", but got "
                                     << t.shape());
  }
  // shaped() when `t` is defined; an undefined optional tensor passes.
  void optional(const Tensor& t, const char* what, const Shape& want, const char* against,
                const Shape& from) const {
    if (t.defined()) shaped(t, what, want, against, from);
  }
  void rank(const Tensor& t, const char* what, int64_t r) const {
    tensor(t, what);
    DPE_CHECK(t.dim() == r,
              op_ << ": expected a " << r << "-D " << what << ", but got shape " << t.shape());
  }
  // An optional per-channel tensor of the input x: undefined, or [c].
  void channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const {
    optional(t, what, Shape{c}, "input", x.shape());
  }
  const char* op() const { return op_; }
  Device device() const { return device_; }

 private:
  const char* op_;
  Device device_;
};

// x [N, C, ...] for the batch-norm family, viewed as [N, C, S].
struct NcsShape {
  int64_t n, c, s;
};
NcsShape bn_shape(const Args& args, const Tensor& x) {
  args.tensor(x, "input");
  DPE_CHECK(x.dim() >= 2, args.op() << ": expected an input of at least 2 dimensions [N, C, ...], "
                                       "but got shape "
                                    << x.shape());
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

// The training batch norm's arguments (plain and fused with a ReLU).
void check_bn_train(const Args& c, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                    const Tensor& y, const Tensor& mean, const Tensor& var) {
  const NcsShape s = bn_shape(c, x);
  DPE_CHECK(s.n * s.s > 1, c.op() << ": expected more than 1 value per channel when training, "
                                     "got input size "
                                  << x.shape());
  c.channel(gamma, "weight", s.c, x);
  c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
}

// The training backward's arguments (plain and fused with a ReLU); returns x's [N, C, S].
NcsShape check_bn_backward(const Args& c, const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, const Tensor& gx,
                           const Tensor& ggamma, const Tensor& gbeta) {
  const NcsShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.channel(gamma, "weight", s.c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  c.channel(ggamma, "grad_weight", s.c, x);
  c.channel(gbeta, "grad_bias", s.c, x);
  return s;
}

// x [..., D] for layer norm, viewed as [N, D].
LayerNormShape ln_shape(const Args& args, const Tensor& x) {
  args.tensor(x, "input");
  DPE_CHECK(x.dim() >= 1 && x.size(-1) > 0,
            args.op() << ": expected an input [..., D] with D > 0, but got shape " << x.shape());
  return {x.numel() / x.size(-1), x.size(-1)};
}

// The output shape [N, O, Ho, Wo] of a convolution; conv2d_shape (kernels/op_params.h) checks
// the parameters, so its messages are those of every device type.
Shape conv2d_output(const Args& args, const Tensor& x, const Tensor& w, const Conv2dParams& p) {
  args.rank(x, "input", 4);
  args.rank(w, "weight", 4);
  DPE_CHECK(x.size(1) == w.size(1),
            args.op() << ": weight of shape " << w.shape() << " expects input "
                      << "with " << w.size(1) << " channels, but got input of shape " << x.shape());
  const Conv2dShape s = conv2d_shape(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0),
                                     w.size(2), w.size(3), p.stride, p.padding);
  return Shape{s.n, s.o, s.ho, s.wo};
}

// The output shape [N, C, Ho, Wo] of max pooling over an input [N, C, H, W] (checked by
// max_pool2d_shape, as above).
Shape pool2d_output(const Shape& in, const Pool2dParams& p) {
  const Pool2dShape s = max_pool2d_shape(in[0], in[1], in[2], in[3], p.kernel, p.stride, p.padding);
  return Shape{s.n, s.c, s.ho, s.wo};
}

class CheckedBackend final : public Backend {
 public:
  // `impl` implements the slots for tensors on devices of `type`; it outlives the front.
  CheckedBackend(DeviceType type, Backend& impl) : type_(type), impl_(impl) {}

  // --- elementwise ---

  void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override {
    const Args c("add", a, type_);
    c.tensor(a, "a");
    c.shaped(b, "b", a.shape(), "a", a.shape());
    c.shaped(out, "out", a.shape(), "a", a.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("elementwise", 2, a, {&a, &b}, {&out});
                   });
        t.execute()) {
      impl_.add(a, b, alpha, out);
    }
  }

  void mul(const Tensor& a, const Tensor& b, Tensor& out) override {
    const Args c("mul", a, type_);
    c.tensor(a, "a");
    c.shaped(b, "b", a.shape(), "a", a.shape());
    c.shaped(out, "out", a.shape(), "a", a.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("elementwise", 1, a, {&a, &b}, {&out});
                   });
        t.execute()) {
      impl_.mul(a, b, out);
    }
  }

  void scale(const Tensor& a, float s, Tensor& out) override {
    const Args c("scale", a, type_);
    c.tensor(a, "a");
    c.shaped(out, "out", a.shape(), "a", a.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("elementwise", 1, a, {&a}, {&out}); });
        t.execute()) {
      impl_.scale(a, s, out);
    }
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    const Args c("relu", x, type_);
    c.tensor(x, "input");
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("elementwise", 1, x, {&x}, {&y}); });
        t.execute()) {
      impl_.relu_forward(x, y);
    }
  }

  void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    const Args c("relu_backward", y, type_);
    c.tensor(y, "output");
    c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
    c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("elementwise", 1, y, {&y, &gy}, {&gx});
                   });
        t.execute()) {
      impl_.relu_backward(y, gy, gx);
    }
  }

  void gelu_forward(const Tensor& x, Tensor& y) override {
    const Args c("gelu", x, type_);
    c.tensor(x, "input");
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("elementwise", 10, x, {&x}, {&y}); });
        t.execute()) {
      impl_.gelu_forward(x, y);
    }
  }

  void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) override {
    const Args c("gelu_backward", x, type_);
    c.tensor(x, "input");
    c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
    c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("elementwise", 16, x, {&x, &gy}, {&gx});
                   });
        t.execute()) {
      impl_.gelu_backward(x, gy, gx);
    }
  }

  // --- reductions ---

  void sum_all(const Tensor& x, Tensor& out) override {
    const Args c("sum", x, type_);
    c.tensor(x, "input");
    c.tensor(out, "out");
    DPE_CHECK(out.numel() == 1, "sum: expected a scalar out, but got shape " << out.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("reduction", 1, x, {&x}, {&out}); });
        t.execute()) {
      impl_.sum_all(x, out);
    }
  }

  void argmax_rows(const Tensor& x, Tensor& out) override {
    const Args c("argmax", x, type_);
    c.rank(x, "input", 2);
    DPE_CHECK(x.size(1) > 0,
              "argmax: expected a non-empty dim 1, but got input of shape " << x.shape());
    c.shaped(out, "out", Shape{x.size(0)}, "input", x.shape(), DType::kInt64);
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("reduction", 1, x, {&x}, {&out}); });
        t.execute()) {
      impl_.argmax_rows(x, out);
    }
  }

  bool all_finite(const Tensor& x) override {
    const Args c("all_finite", x, type_);
    c.tensor(x, "input");
    const TracedOp t(c.op(), c.device(),
                     [&] { return op_cost::elementwise("reduction", 1, x, {&x}, {}); });
    return t.execute() ? impl_.all_finite(x) : true;  // a trace without the work: finite
  }

  // --- dense layers ---

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const Args c("linear", x, type_);
    c.rank(x, "input", 2);
    c.rank(w, "weight", 2);
    DPE_CHECK(x.size(1) == w.size(1),
              "linear: input of shape " << x.shape() << " and weight of shape " << w.shape()
                                        << " cannot be multiplied (" << x.size(1)
                                        << " input features, weight expects " << w.size(1) << ")");
    c.optional(b, "bias", Shape{w.size(0)}, "weight", w.shape());
    c.shaped(y, "output", Shape{x.size(0), w.size(0)}, "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("gemm", 2.0 * x.size(0) * x.size(1) * w.size(0),
                                          {&x, &w, &b}, {&y});
                   });
        t.execute()) {
      impl_.linear_forward(x, w, b, y);
    }
  }

  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx, Tensor& gw,
                       Tensor& gb, float param_grad_scale) override {
    const Args c("linear_backward", x, type_);
    c.rank(x, "input", 2);
    c.rank(w, "weight", 2);
    DPE_CHECK(x.size(1) == w.size(1), "linear_backward: input of shape "
                                          << x.shape() << " and weight of shape " << w.shape()
                                          << " cannot be multiplied");
    c.shaped(gy, "grad_output", Shape{x.size(0), w.size(0)}, "input", x.shape());
    c.optional(gx, "grad_input", x.shape(), "input", x.shape());
    c.optional(gw, "grad_weight", w.shape(), "weight", w.shape());
    c.optional(gb, "grad_bias", Shape{w.size(0)}, "weight", w.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make(
                         "gemm",
                         2.0 * x.size(0) * x.size(1) * w.size(0) *
                                 ((gx.defined() ? 1 : 0) + (gw.defined() ? 1 : 0)) +
                             (gb.defined() ? 1.0 * gy.numel() : 0.0),
                         {&x, &w, &gy}, {&gx, &gw, &gb});
                   });
        t.execute()) {
      impl_.linear_backward(x, w, gy, gx, gw, gb, param_grad_scale);
    }
  }

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override {
    const Args c("matmul", a, type_);
    c.rank(a, "a", 2);
    c.rank(b, "b", 2);
    DPE_CHECK(a.size(1) == b.size(0), "matmul: a of shape " << a.shape() << " and b of shape "
                                                            << b.shape()
                                                            << " cannot be multiplied");
    c.shaped(out, "out", Shape{a.size(0), b.size(1)}, "a", a.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("gemm", 2.0 * a.size(0) * a.size(1) * b.size(1), {&a, &b},
                                          {&out});
                   });
        t.execute()) {
      impl_.matmul(a, b, out);
    }
  }

  // --- embedding ---

  void embedding_forward(const Tensor& weight, const Tensor& index, Tensor& y) override {
    const Args c("embedding", weight, type_);
    c.rank(weight, "weight", 2);
    c.tensor(index, "indices", DType::kInt64);
    DPE_CHECK(index.dim() == 1,
              "embedding: expected 1-D indices [N], but got shape " << index.shape());
    c.shaped(y, "output", Shape{index.size(0), weight.size(1)}, "weight", weight.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("embedding", 0, {&index, &y}, {&y});
                   });
        t.execute()) {
      impl_.embedding_forward(weight, index, y);
    }
  }

  void embedding_backward(const Tensor& index, const Tensor& gy, Tensor& gw) override {
    const Args c("embedding_backward", gw, type_);
    c.rank(gw, "grad_weight", 2);
    c.tensor(index, "indices", DType::kInt64);
    DPE_CHECK(index.dim() == 1,
              "embedding_backward: expected 1-D indices [N], but got shape " << index.shape());
    c.shaped(gy, "grad_output", Shape{index.size(0), gw.size(1)}, "grad_weight", gw.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("embedding", 1.0 * gy.numel(), {&index, &gy}, {&gw});
                   });
        t.execute()) {
      impl_.embedding_backward(index, gy, gw);
    }
  }

  void bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out) override {
    const Args c("bmm", a, type_);
    c.rank(a, "batch1", 3);
    c.rank(b, "batch2", 3);
    const int64_t m = a.size(trans_a ? 2 : 1), ka = a.size(trans_a ? 1 : 2);
    const int64_t kb = b.size(trans_b ? 2 : 1), n = b.size(trans_b ? 1 : 2);
    DPE_CHECK(a.size(0) == b.size(0) && ka == kb,
              "bmm: batch1 of shape "
                  << a.shape() << (trans_a ? " (transposed)" : "") << " and batch2 of shape "
                  << b.shape() << (trans_b ? " (transposed)" : "") << " cannot be multiplied");
    c.shaped(out, "out", Shape{a.size(0), m, n}, "batch1", a.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("gemm", 2.0 * out.numel() * ka, {&a, &b}, {&out});
                   });
        t.execute()) {
      impl_.bmm(a, b, trans_a, trans_b, out);
    }
  }

  // --- convolution and pooling ---

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                      Tensor& y) override {
    const Args c("conv2d", x, type_);
    const Shape out = conv2d_output(c, x, w, p);
    c.optional(b, "bias", Shape{w.size(0)}, "weight", w.shape());
    c.shaped(y, "output", out, "input", x.shape());
    if (x.size(0) == 0) return;
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("conv", op_cost::conv2d_flops(w, y), {&x, &w, &b}, {&y});
                   });
        t.execute()) {
      impl_.conv2d_forward(x, w, b, p, y);
    }
  }

  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                       Tensor& gx, Tensor& gw, Tensor& gb) override {
    const Args c("conv2d_backward", x, type_);
    const Shape out = conv2d_output(c, x, w, p);
    c.shaped(gy, "grad_output", out, "input", x.shape());
    c.optional(gx, "grad_input", x.shape(), "input", x.shape());
    c.optional(gw, "grad_weight", w.shape(), "weight", w.shape());
    c.optional(gb, "grad_bias", Shape{w.size(0)}, "weight", w.shape());
    if (x.size(0) == 0) {  // an empty batch contributes nothing
      if (gw.defined()) gw.zero_();
      if (gb.defined()) gb.zero_();
      return;
    }
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("conv",
                                          op_cost::conv2d_flops(w, gy) * ((gx.defined() ? 1 : 0) +
                                                                          (gw.defined() ? 1 : 0)) +
                                              (gb.defined() ? 1.0 * gy.numel() : 0.0),
                                          {&x, &w, &gy}, {&gx, &gw, &gb});
                   });
        t.execute()) {
      impl_.conv2d_backward(x, w, gy, p, gx, gw, gb);
    }
  }

  void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                          Tensor& workspace) override {
    const Args c("max_pool2d", x, type_);
    c.rank(x, "input", 4);
    const Shape out = pool2d_output(x.shape(), p);
    c.shaped(y, "output", out, "input", x.shape());
    c.shaped(workspace, "indices", out, "input", x.shape(), DType::kInt64);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("pool", 1.0 * y.numel() * p.kernel * p.kernel, {&x},
                                          {&y, &workspace});
                   });
        t.execute()) {
      impl_.max_pool2d_forward(x, p, y, workspace);
    }
  }

  void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                           Tensor& gx) override {
    const Args c("max_pool2d_backward", gy, type_);
    c.rank(gx, "grad_input", 4);
    const Shape out = pool2d_output(gx.shape(), p);
    c.shaped(gy, "grad_output", out, "grad_input", gx.shape());
    c.shaped(workspace, "indices", out, "grad_input", gx.shape(), DType::kInt64);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("pool", 1.0 * gy.numel(), {&gy, &workspace}, {&gx});
                   });
        t.execute()) {
      impl_.max_pool2d_backward(gy, workspace, p, gx);
    }
  }

  // --- batch normalisation ---

  void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                Tensor& y, Tensor& mean, Tensor& var) override {
    const Args c("batch_norm", x, type_);
    check_bn_train(c, x, gamma, beta, y, mean, var);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 8.0 * x.numel(), {&x, &x, &gamma, &beta},
                                          {&y, &mean, &var});
                   });
        t.execute()) {
      impl_.batch_norm_forward_train(x, gamma, beta, eps, y, mean, var);
    }
  }

  void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps,
                               Tensor& y) override {
    const Args c("batch_norm", x, type_);
    const NcsShape s = bn_shape(c, x);
    c.channel(gamma, "weight", s.c, x);
    c.channel(beta, "bias", s.c, x);
    c.shaped(mean, "running_mean", Shape{s.c}, "input", x.shape());
    c.shaped(var, "running_var", Shape{s.c}, "input", x.shape());
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (x.numel() == 0) return;
    if (TracedOp t(
            c.op(), c.device(),
            [&] {
              return op_cost::make("norm", 4.0 * x.numel(), {&x, &gamma, &beta, &mean, &var}, {&y});
            });
        t.execute()) {
      impl_.batch_norm_forward_eval(x, gamma, beta, mean, var, eps, y);
    }
  }

  void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                           Tensor& ggamma, Tensor& gbeta) override {
    const Args c("batch_norm_backward", x, type_);
    check_bn_backward(c, x, gy, gamma, mean, var, gx, ggamma, gbeta);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 12.0 * x.numel(),
                                          {&x, &gy, &x, &gy, &gamma, &mean, &var},
                                          {&gx, &ggamma, &gbeta});
                   });
        t.execute()) {
      impl_.batch_norm_backward(x, gy, gamma, mean, var, eps, gx, ggamma, gbeta);
    }
  }

  void batch_norm_relu_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, Tensor& y, Tensor& mean, Tensor& var) override {
    const Args c("batch_norm_relu", x, type_);
    check_bn_train(c, x, gamma, beta, y, mean, var);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 9.0 * x.numel(), {&x, &x, &gamma, &beta},
                                          {&y, &mean, &var});
                   });
        t.execute()) {
      impl_.batch_norm_relu_forward_train(x, gamma, beta, eps, y, mean, var);
    }
  }

  void batch_norm_relu_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                const Tensor& beta, const Tensor& mean, const Tensor& var,
                                float eps, Tensor& gx, Tensor& ggamma, Tensor& gbeta) override {
    const Args c("batch_norm_relu_backward", x, type_);
    const NcsShape s = check_bn_backward(c, x, gy, gamma, mean, var, gx, ggamma, gbeta);
    c.channel(beta, "bias", s.c, x);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 16.0 * x.numel(),
                                          {&x, &gy, &x, &gy, &gamma, &beta, &mean, &var},
                                          {&gx, &ggamma, &gbeta});
                   });
        t.execute()) {
      impl_.batch_norm_relu_backward(x, gy, gamma, beta, mean, var, eps, gx, ggamma, gbeta);
    }
  }

  void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override {
    const Args c("channel_sums", x, type_);
    const NcsShape s = bn_shape(c, x);
    c.shaped(sum, "sum", Shape{s.c}, "input", x.shape());
    c.shaped(sumsq, "sumsq", Shape{s.c}, "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 3.0 * x.numel(), {&x}, {&sum, &sumsq});
                   });
        t.execute()) {
      impl_.channel_sums(x, sum, sumsq);
    }
  }

  void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                         Tensor& sum_gy_xmu) override {
    const Args c("channel_grad_sums", x, type_);
    const NcsShape s = bn_shape(c, x);
    c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
    c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
    c.shaped(sum_gy, "sum_dy", Shape{s.c}, "input", x.shape());
    c.shaped(sum_gy_xmu, "sum_dy_xmu", Shape{s.c}, "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 4.0 * x.numel(), {&x, &gy, &mean},
                                          {&sum_gy, &sum_gy_xmu});
                   });
        t.execute()) {
      impl_.channel_grad_sums(x, gy, mean, sum_gy, sum_gy_xmu);
    }
  }

  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& gamma, const Tensor& beta, Tensor& y) override {
    const Args c("batch_norm_elemt", x, type_);
    const NcsShape s = bn_shape(c, x);
    c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
    c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
    c.channel(gamma, "weight", s.c, x);
    c.channel(beta, "bias", s.c, x);
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 4.0 * x.numel(),
                                          {&x, &mean, &invstd, &gamma, &beta}, {&y});
                   });
        t.execute()) {
      impl_.batch_norm_apply(x, mean, invstd, gamma, beta, y);
    }
  }

  void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& gamma, const Tensor& mean_gy,
                                 const Tensor& mean_gy_xmu, Tensor& gx) override {
    const Args c("batch_norm_backward_elemt", x, type_);
    const NcsShape s = bn_shape(c, x);
    c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
    c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
    c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
    c.channel(gamma, "weight", s.c, x);
    c.shaped(mean_gy, "mean_dy", Shape{s.c}, "input", x.shape());
    c.shaped(mean_gy_xmu, "mean_dy_xmu", Shape{s.c}, "input", x.shape());
    c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 8.0 * x.numel(),
                                          {&x, &gy, &mean, &invstd, &gamma, &mean_gy, &mean_gy_xmu},
                                          {&gx});
                   });
        t.execute()) {
      impl_.batch_norm_backward_elemt(x, gy, mean, invstd, gamma, mean_gy, mean_gy_xmu, gx);
    }
  }

  // --- layer normalisation ---

  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) override {
    const Args c("layer_norm", x, type_);
    const LayerNormShape s = ln_shape(c, x);
    c.optional(gamma, "weight", Shape{s.cols}, "input", x.shape());
    c.optional(beta, "bias", Shape{s.cols}, "input", x.shape());
    c.shaped(y, "output", x.shape(), "input", x.shape());
    c.shaped(mean, "mean", Shape{s.rows}, "input", x.shape());
    c.shaped(rstd, "rstd", Shape{s.rows}, "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 8.0 * x.numel(), {&x, &gamma, &beta},
                                          {&y, &mean, &rstd});
                   });
        t.execute()) {
      impl_.layer_norm_forward(x, gamma, beta, eps, y, mean, rstd);
    }
  }

  void layer_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, Tensor& gx, Tensor& ggamma,
                           Tensor& gbeta) override {
    const Args c("layer_norm_backward", x, type_);
    const LayerNormShape s = ln_shape(c, x);
    c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
    c.optional(gamma, "weight", Shape{s.cols}, "input", x.shape());
    c.shaped(mean, "mean", Shape{s.rows}, "input", x.shape());
    c.shaped(rstd, "rstd", Shape{s.rows}, "input", x.shape());
    c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
    c.optional(ggamma, "grad_weight", Shape{s.cols}, "input", x.shape());
    c.optional(gbeta, "grad_bias", Shape{s.cols}, "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("norm", 12.0 * x.numel(), {&x, &gy, &gamma, &mean, &rstd},
                                          {&gx, &ggamma, &gbeta});
                   });
        t.execute()) {
      impl_.layer_norm_backward(x, gy, gamma, mean, rstd, gx, ggamma, gbeta);
    }
  }

  // --- softmax ---

  void softmax_forward(const Tensor& x, bool causal, Tensor& y) override {
    const Args c("softmax", x, type_);
    c.tensor(x, "input");
    DPE_CHECK(x.dim() >= (causal ? 2 : 1), "softmax: expected an input of at least "
                                               << (causal ? 2 : 1) << " dimensions, but got shape "
                                               << x.shape());
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("softmax", 5, x, {&x}, {&y}); });
        t.execute()) {
      impl_.softmax_forward(x, causal, y);
    }
  }

  void softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    const Args c("softmax_backward", y, type_);
    c.tensor(y, "output");
    DPE_CHECK(y.dim() >= 1,
              "softmax_backward: expected an output of at least 1 dimension, but "
              "got shape "
                  << y.shape());
    c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
    c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("softmax", 4, y, {&y, &gy}, {&gx});
                   });
        t.execute()) {
      impl_.softmax_backward(y, gy, gx);
    }
  }

  // --- losses ---

  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    const Args c("log_softmax", x, type_);
    c.rank(x, "input", 2);
    c.shaped(y, "output", x.shape(), "input", x.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("softmax", 5, x, {&x}, {&y}); });
        t.execute()) {
      impl_.log_softmax_forward(x, y);
    }
  }

  void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    const Args c("log_softmax_backward", y, type_);
    c.rank(y, "output", 2);
    c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
    c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("softmax", 4, y, {&y, &gy}, {&gx});
                   });
        t.execute()) {
      impl_.log_softmax_backward(y, gy, gx);
    }
  }

  void nll_loss_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                        Tensor& out) override {
    const Args c("nll_loss", logp, type_);
    c.rank(logp, "input", 2);
    c.tensor(target, "target", DType::kInt64);
    DPE_CHECK(target.dim() == 1 && target.size(0) == logp.size(0),
              "nll_loss: expected input batch_size ("
                  << logp.size(0) << ") to match target batch_size ("
                  << (target.dim() >= 1 ? target.size(0) : 0) << "), input of shape "
                  << logp.shape() << " and target of shape " << target.shape());
    c.tensor(out, "out");
    DPE_CHECK(out.numel() == 1, "nll_loss: expected a scalar out, but got shape " << out.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::make("loss", 1.0 * target.numel(), {&target}, {&out}); });
        t.execute()) {
      impl_.nll_loss_forward(logp, target, ignore_index, out);
    }
  }

  void nll_loss_backward(const Tensor& gout, const Tensor& target, int64_t ignore_index,
                         Tensor& gx) override {
    const Args c("nll_loss_backward", gx, type_);
    c.rank(gx, "grad_input", 2);
    c.tensor(gout, "grad_output");
    DPE_CHECK(gout.numel() == 1,
              "nll_loss_backward: expected a scalar grad_output, but got shape " << gout.shape());
    c.shaped(target, "target", Shape{gx.size(0)}, "grad_input", gx.shape(), DType::kInt64);
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::make("loss", 1.0 * target.numel(), {&gout, &target}, {&gx});
                   });
        t.execute()) {
      impl_.nll_loss_backward(gout, target, ignore_index, gx);
    }
  }

  // --- dropout and optimizers ---

  void dropout_mask(float p, uint64_t seed, Tensor& mask) override {
    const Args c("dropout", mask, type_);
    c.tensor(mask, "mask");
    if (TracedOp t(c.op(), c.device(),
                   [&] { return op_cost::elementwise("elementwise", 4, mask, {}, {&mask}); });
        t.execute()) {
      impl_.dropout_mask(p, seed, mask);
    }
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdOptions& o,
                bool first) override {
    const Args c("sgd", param, type_);
    c.tensor(param, "param");
    c.shaped(grad, "grad", param.shape(), "param", param.shape());
    DPE_CHECK(!o.nesterov || (o.momentum > 0.0f && o.dampening == 0.0f),
              "sgd: Nesterov momentum requires a momentum and zero dampening");
    if (o.momentum != 0.0f) c.shaped(buf, "momentum_buffer", param.shape(), "param", param.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("optimizer", 5, param, {&param, &grad, &buf},
                                                 {&param, &buf});
                   });
        t.execute()) {
      impl_.sgd_step(param, grad, buf, o, first);
    }
    param.bump_version();
    if (o.momentum != 0.0f) buf.bump_version();
  }

  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamOptions& o, int64_t step) override {
    const Args c(o.adamw ? "adamw" : "adam", param, type_);
    c.tensor(param, "param");
    c.shaped(grad, "grad", param.shape(), "param", param.shape());
    c.shaped(exp_avg, "exp_avg", param.shape(), "param", param.shape());
    c.shaped(exp_avg_sq, "exp_avg_sq", param.shape(), "param", param.shape());
    if (TracedOp t(c.op(), c.device(),
                   [&] {
                     return op_cost::elementwise("optimizer", 15, param,
                                                 {&param, &grad, &exp_avg, &exp_avg_sq},
                                                 {&param, &exp_avg, &exp_avg_sq});
                   });
        t.execute()) {
      impl_.adam_step(param, grad, exp_avg, exp_avg_sq, o, step);
    }
    param.bump_version();
    exp_avg.bump_version();
    exp_avg_sq.bump_version();
  }

 private:
  const DeviceType type_;
  Backend& impl_;
};

}  // namespace

Backend& backend_for(Device device) {
  // One front per device type, created on first use (thread-safely) and kept until exit, like
  // the device contexts the tables use.
  if (device.is_cuda()) {
    static CheckedBackend cuda(DeviceType::kCuda, cuda_backend());
    return cuda;
  }
  static CheckedBackend host(DeviceType::kHost, host_backend());
  return host;
}

}  // namespace dpe
