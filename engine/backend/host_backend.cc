#include "engine/backend/host_backend.h"

#include <mutex>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/batch_norm.h"
#include "kernels/host/conv2d.h"
#include "kernels/host/dropout.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/host_context.h"
#include "kernels/host/linear.h"
#include "kernels/host/log_softmax.h"
#include "kernels/host/matmul.h"
#include "kernels/host/max_pool2d.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/optim_step.h"
#include "kernels/host/reduce.h"

namespace dpe {

namespace {

// One backend call: the op's name for messages, its device, and that device's HostContext, held
// (locked) until the call returns. The checks throw dpe::Error naming the op.
class Call {
 public:
  Call(const char* op, Device device, std::mutex& mu, host::HostContext& ctx)
      : op_(op), device_(device), lock_(mu), ctx_(ctx) {}

  host::HostContext& ctx() { return ctx_; }

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
  void rank(const Tensor& t, const char* what, int64_t r) const {
    tensor(t, what);
    DPE_CHECK(t.dim() == r,
              op_ << ": expected a " << r << "-D " << what << ", but got shape " << t.shape());
  }
  // An optional per-channel tensor: undefined, or [c].
  float* channel(const Tensor& t, const char* what, int64_t c, const Tensor& x) const {
    if (!t.defined()) return nullptr;
    shaped(t, what, Shape{c}, "input", x.shape());
    return t.data<float>();
  }
  const char* op() const { return op_; }

 private:
  const char* op_;
  Device device_;
  std::unique_lock<std::mutex> lock_;
  host::HostContext& ctx_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// x viewed as [N, C, S] for the batch-norm family.
host::BatchNormShape bn_shape(const Call& call, const Tensor& x) {
  call.tensor(x, "input");
  DPE_CHECK(x.dim() >= 2, call.op() << ": expected an input of at least 2 dimensions [N, C, ...], "
                                       "but got shape "
                                    << x.shape());
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

}  // namespace

struct HostBackend::Contexts {
  struct Slot {
    std::mutex mu;
    host::HostContext ctx;
  };
  std::mutex mu;  // guards `slots`, not the contexts
  std::vector<std::unique_ptr<Slot>> slots;

  Call call(const char* op, const Tensor& first) {
    DPE_CHECK(first.defined(), op << ": the first tensor argument is undefined");
    const Device d = first.device();
    DPE_CHECK(d.is_host(), op << ": the host backend got a tensor on " << d);
    Slot* slot;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(slots.size()) <= d.index()) slots.resize(d.index() + 1);
      if (!slots[d.index()]) slots[d.index()] = std::make_unique<Slot>();
      slot = slots[d.index()].get();
    }
    return Call(op, d, slot->mu, slot->ctx);
  }
};

HostBackend::HostBackend() : contexts_(std::make_unique<Contexts>()) {}
HostBackend::~HostBackend() = default;

// --- elementwise ---

void HostBackend::add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  Call c = contexts_->call("add", a);
  c.tensor(a, "a");
  c.shaped(b, "b", a.shape(), "a", a.shape());
  c.shaped(out, "out", a.shape(), "a", a.shape());
  host::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(), a.numel());
}

void HostBackend::mul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = contexts_->call("mul", a);
  c.tensor(a, "a");
  c.shaped(b, "b", a.shape(), "a", a.shape());
  c.shaped(out, "out", a.shape(), "a", a.shape());
  host::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void HostBackend::scale(const Tensor& a, float s, Tensor& out) {
  Call c = contexts_->call("scale", a);
  c.tensor(a, "a");
  c.shaped(out, "out", a.shape(), "a", a.shape());
  host::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
}

void HostBackend::relu_forward(const Tensor& x, Tensor& y) {
  Call c = contexts_->call("relu", x);
  c.tensor(x, "input");
  c.shaped(y, "output", x.shape(), "input", x.shape());
  host::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
}

void HostBackend::relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = contexts_->call("relu_backward", y);
  c.tensor(y, "output");
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
  host::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
}

// --- reductions ---

void HostBackend::sum_all(const Tensor& x, Tensor& out) {
  Call c = contexts_->call("sum", x);
  c.tensor(x, "input");
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "sum: expected a scalar out, but got shape " << out.shape());
  out.data<float>()[0] = host::sum_all(c.ctx(), x.data<float>(), x.numel());
}

void HostBackend::argmax_rows(const Tensor& x, Tensor& out) {
  Call c = contexts_->call("argmax", x);
  c.rank(x, "input", 2);
  DPE_CHECK(x.size(1) > 0,
            "argmax: expected a non-empty dim 1, but got input of shape " << x.shape());
  c.shaped(out, "out", Shape{x.size(0)}, "input", x.shape(), DType::kInt64);
  host::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
}

bool HostBackend::all_finite(const Tensor& x) {
  Call c = contexts_->call("all_finite", x);
  c.tensor(x, "input");
  return host::all_finite(c.ctx(), x.data<float>(), x.numel());
}

// --- dense layers ---

void HostBackend::linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  Call c = contexts_->call("linear", x);
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  DPE_CHECK(x.size(1) == w.size(1), "linear: input of shape "
                                        << x.shape() << " and weight of shape " << w.shape()
                                        << " cannot be multiplied (" << x.size(1)
                                        << " input features, weight expects " << w.size(1) << ")");
  const host::LinearShape s{x.size(0), x.size(1), w.size(0)};
  if (b.defined()) c.shaped(b, "bias", Shape{s.out}, "weight", w.shape());
  c.shaped(y, "output", Shape{s.batch, s.out}, "input", x.shape());
  host::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void HostBackend::linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                                  Tensor& gw, Tensor& gb) {
  Call c = contexts_->call("linear_backward", x);
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  DPE_CHECK(x.size(1) == w.size(1), "linear_backward: input of shape "
                                        << x.shape() << " and weight of shape " << w.shape()
                                        << " cannot be multiplied");
  const host::LinearShape s{x.size(0), x.size(1), w.size(0)};
  c.shaped(gy, "grad_output", Shape{s.batch, s.out}, "input", x.shape());
  if (gx.defined()) c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  if (gw.defined()) c.shaped(gw, "grad_weight", w.shape(), "weight", w.shape());
  if (gb.defined()) c.shaped(gb, "grad_bias", Shape{s.out}, "weight", w.shape());
  host::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void HostBackend::matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = contexts_->call("matmul", a);
  c.rank(a, "a", 2);
  c.rank(b, "b", 2);
  DPE_CHECK(a.size(1) == b.size(0), "matmul: a of shape " << a.shape() << " and b of shape "
                                                          << b.shape() << " cannot be multiplied");
  c.shaped(out, "out", Shape{a.size(0), b.size(1)}, "a", a.shape());
  host::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
               b.size(1));
}

// --- convolution and pooling ---

namespace {
host::Conv2dShape conv_shape(const Call& c, const Tensor& x, const Tensor& w,
                             const Conv2dParams& p) {
  c.rank(x, "input", 4);
  c.rank(w, "weight", 4);
  DPE_CHECK(x.size(1) == w.size(1), c.op() << ": weight of shape " << w.shape() << " expects input "
                                           << "with " << w.size(1)
                                           << " channels, but got input of shape " << x.shape());
  return host::conv2d_shape(x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
                            w.size(3), p.stride, p.padding);
}
}  // namespace

void HostBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Conv2dParams& p, Tensor& y) {
  Call c = contexts_->call("conv2d", x);
  const host::Conv2dShape s = conv_shape(c, x, w, p);
  if (b.defined()) c.shaped(b, "bias", Shape{s.o}, "weight", w.shape());
  c.shaped(y, "output", Shape{s.n, s.o, s.ho, s.wo}, "input", x.shape());
  if (s.n == 0) return;
  host::conv2d_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void HostBackend::conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                                  const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) {
  Call c = contexts_->call("conv2d_backward", x);
  const host::Conv2dShape s = conv_shape(c, x, w, p);
  c.shaped(gy, "grad_output", Shape{s.n, s.o, s.ho, s.wo}, "input", x.shape());
  if (gx.defined()) c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  if (gw.defined()) c.shaped(gw, "grad_weight", w.shape(), "weight", w.shape());
  if (gb.defined()) c.shaped(gb, "grad_bias", Shape{s.o}, "weight", w.shape());
  if (s.n == 0) {  // an empty batch contributes nothing
    if (gw.defined()) gw.zero_();
    if (gb.defined()) gb.zero_();
    return;
  }
  host::conv2d_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void HostBackend::max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                     Tensor& workspace) {
  Call c = contexts_->call("max_pool2d", x);
  c.rank(x, "input", 4);
  const host::Pool2dShape s = host::max_pool2d_shape(x.size(0), x.size(1), x.size(2), x.size(3),
                                                     p.kernel, p.stride, p.padding);
  const Shape out{s.n, s.c, s.ho, s.wo};
  c.shaped(y, "output", out, "input", x.shape());
  c.shaped(workspace, "indices", out, "input", x.shape(), DType::kInt64);
  host::max_pool2d_forward(c.ctx(), s, x.data<float>(), y.data<float>(), workspace.data<int64_t>());
}

void HostBackend::max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                      const Pool2dParams& p, Tensor& gx) {
  Call c = contexts_->call("max_pool2d_backward", gy);
  c.rank(gx, "grad_input", 4);
  const host::Pool2dShape s = host::max_pool2d_shape(gx.size(0), gx.size(1), gx.size(2), gx.size(3),
                                                     p.kernel, p.stride, p.padding);
  const Shape out{s.n, s.c, s.ho, s.wo};
  c.shaped(gy, "grad_output", out, "grad_input", gx.shape());
  c.shaped(workspace, "indices", out, "grad_input", gx.shape(), DType::kInt64);
  host::max_pool2d_backward(c.ctx(), s, gy.data<float>(), workspace.data<int64_t>(),
                            gx.data<float>());
}

// --- batch normalisation ---

void HostBackend::batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           float eps, Tensor& y, Tensor& mean, Tensor& var) {
  Call c = contexts_->call("batch_norm", x);
  const host::BatchNormShape s = bn_shape(c, x);
  DPE_CHECK(s.n * s.s > 1,
            "batch_norm: expected more than 1 value per channel when training, "
            "got input size "
                << x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  host::batch_norm_forward_train(c.ctx(), s, x.data<float>(), g, b, eps, y.data<float>(),
                                 mean.data<float>(), var.data<float>());
}

void HostBackend::batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& mean, const Tensor& var, float eps,
                                          Tensor& y) {
  Call c = contexts_->call("batch_norm", x);
  const host::BatchNormShape s = bn_shape(c, x);
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(mean, "running_mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "running_var", Shape{s.c}, "input", x.shape());
  c.shaped(y, "output", x.shape(), "input", x.shape());
  if (x.numel() == 0) return;
  host::batch_norm_forward_eval(c.ctx(), s, x.data<float>(), g, b, mean.data<float>(),
                                var.data<float>(), eps, y.data<float>());
}

void HostBackend::batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                      const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                                      Tensor& ggamma, Tensor& gbeta) {
  Call c = contexts_->call("batch_norm_backward", x);
  const host::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  float* gg = c.channel(ggamma, "grad_weight", s.c, x);
  float* gb = c.channel(gbeta, "grad_bias", s.c, x);
  host::batch_norm_backward(c.ctx(), s, x.data<float>(), gy.data<float>(), g, mean.data<float>(),
                            var.data<float>(), eps, gx.data<float>(), gg, gb);
}

void HostBackend::channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) {
  Call c = contexts_->call("channel_sums", x);
  const host::BatchNormShape s = bn_shape(c, x);
  c.shaped(sum, "sum", Shape{s.c}, "input", x.shape());
  c.shaped(sumsq, "sumsq", Shape{s.c}, "input", x.shape());
  host::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                     s.s);
}

void HostBackend::channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                    Tensor& sum_gy, Tensor& sum_gy_xmu) {
  Call c = contexts_->call("channel_grad_sums", x);
  const host::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy, "sum_dy", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy_xmu, "sum_dy_xmu", Shape{s.c}, "input", x.shape());
  host::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                          sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
}

void HostBackend::batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& gamma, const Tensor& beta, Tensor& y) {
  Call c = contexts_->call("batch_norm_elemt", x);
  const host::BatchNormShape s = bn_shape(c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  const float* b = c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  host::batch_norm_apply(c.ctx(), s, x.data<float>(), mean.data<float>(), invstd.data<float>(), g,
                         b, y.data<float>());
}

void HostBackend::batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                            const Tensor& invstd, const Tensor& gamma,
                                            const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                            Tensor& gx) {
  Call c = contexts_->call("batch_norm_backward_elemt", x);
  const host::BatchNormShape s = bn_shape(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  const float* g = c.channel(gamma, "weight", s.c, x);
  c.shaped(mean_gy, "mean_dy", Shape{s.c}, "input", x.shape());
  c.shaped(mean_gy_xmu, "mean_dy_xmu", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  host::batch_norm_backward_elemt(c.ctx(), s, x.data<float>(), gy.data<float>(), mean.data<float>(),
                                  invstd.data<float>(), g, mean_gy.data<float>(),
                                  mean_gy_xmu.data<float>(), gx.data<float>());
}

// --- losses ---

void HostBackend::log_softmax_forward(const Tensor& x, Tensor& y) {
  Call c = contexts_->call("log_softmax", x);
  c.rank(x, "input", 2);
  c.shaped(y, "output", x.shape(), "input", x.shape());
  host::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
}

void HostBackend::log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = contexts_->call("log_softmax_backward", y);
  c.rank(y, "output", 2);
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
  host::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                             y.size(0), y.size(1));
}

void HostBackend::nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) {
  Call c = contexts_->call("nll_loss", logp);
  c.rank(logp, "input", 2);
  c.tensor(target, "target", DType::kInt64);
  DPE_CHECK(target.dim() == 1 && target.size(0) == logp.size(0),
            "nll_loss: expected input batch_size ("
                << logp.size(0) << ") to match target batch_size ("
                << (target.dim() >= 1 ? target.size(0) : 0) << "), input of shape " << logp.shape()
                << " and target of shape " << target.shape());
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "nll_loss: expected a scalar out, but got shape " << out.shape());
  out.data<float>()[0] = host::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(),
                                                logp.size(0), logp.size(1));
}

void HostBackend::nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) {
  Call c = contexts_->call("nll_loss_backward", gx);
  c.rank(gx, "grad_input", 2);
  c.tensor(gout, "grad_output");
  DPE_CHECK(gout.numel() == 1,
            "nll_loss_backward: expected a scalar grad_output, but got shape " << gout.shape());
  c.shaped(target, "target", Shape{gx.size(0)}, "grad_input", gx.shape(), DType::kInt64);
  host::nll_loss_backward(c.ctx(), gout.data<float>()[0], target.data<int64_t>(), gx.data<float>(),
                          gx.size(0), gx.size(1));
}

// --- dropout and optimizers ---

void HostBackend::dropout_mask(float p, uint64_t seed, Tensor& mask) {
  Call c = contexts_->call("dropout", mask);
  c.tensor(mask, "mask");
  host::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
}

void HostBackend::sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                           float dampening, float weight_decay, bool nesterov, bool first) {
  Call c = contexts_->call("sgd", param);
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  DPE_CHECK(!nesterov || (momentum > 0.0f && dampening == 0.0f),
            "sgd: Nesterov momentum requires a momentum and zero dampening");
  if (momentum != 0.0f) c.shaped(buf, "momentum_buffer", param.shape(), "param", param.shape());
  host::SgdOptions o{lr, momentum, dampening, weight_decay, nesterov};
  host::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                 momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
  param.bump_version();
  if (momentum != 0.0f) buf.bump_version();
}

void HostBackend::adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step, bool adamw) {
  Call c = contexts_->call(adamw ? "adamw" : "adam", param);
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  c.shaped(exp_avg, "exp_avg", param.shape(), "param", param.shape());
  c.shaped(exp_avg_sq, "exp_avg_sq", param.shape(), "param", param.shape());
  host::AdamOptions o{lr, beta1, beta2, eps, weight_decay, adamw};
  host::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                  exp_avg_sq.data<float>(), o, step, param.numel());
  param.bump_version();
  exp_avg.bump_version();
  exp_avg_sq.bump_version();
}

}  // namespace dpe
