#include "engine/backend/host_backend.h"

#include <mutex>
#include <vector>

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

// One backend call: its device's HostContext, held (locked) until the call returns.
class Call {
 public:
  Call(std::mutex& mu, host::HostContext& ctx) : lock_(mu), ctx_(ctx) {}

  host::HostContext& ctx() { return ctx_; }

 private:
  std::unique_lock<std::mutex> lock_;
  host::HostContext& ctx_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The kernels' views of checked arguments (backend.cc): x [N, C, ...] as [N, C, S]; a convolution
// of x [N, C, H, W] by w [O, C, kh, kw] into y [N, O, Ho, Wo]; pooling of x into y [N, C, Ho, Wo].
host::BatchNormShape bn_shape(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}
host::Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p,
                             const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), p.stride,  p.padding, y.size(2), y.size(3)};
}
host::Pool2dShape pool_shape(const Tensor& x, const Pool2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), p.kernel,
          p.stride,  p.padding, y.size(2), y.size(3)};
}

}  // namespace

struct HostBackend::Contexts {
  struct Slot {
    std::mutex mu;
    host::HostContext ctx;
  };
  std::mutex mu;  // guards `slots`, not the contexts
  std::vector<std::unique_ptr<Slot>> slots;

  // The call on `t`'s device (a host device, as Backend checked).
  Call call(const Tensor& t) {
    const int index = t.device().index();
    Slot* slot;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (static_cast<int>(slots.size()) <= index) slots.resize(index + 1);
      if (!slots[index]) slots[index] = std::make_unique<Slot>();
      slot = slots[index].get();
    }
    return Call(slot->mu, slot->ctx);
  }
};

HostBackend::HostBackend() : Backend(DeviceType::kHost), contexts_(std::make_unique<Contexts>()) {}
HostBackend::~HostBackend() = default;

// --- elementwise ---

void HostBackend::do_add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) {
  Call c = contexts_->call(a);
  host::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(), a.numel());
}

void HostBackend::do_mul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = contexts_->call(a);
  host::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
}

void HostBackend::do_scale(const Tensor& a, float s, Tensor& out) {
  Call c = contexts_->call(a);
  host::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
}

void HostBackend::do_relu_forward(const Tensor& x, Tensor& y) {
  Call c = contexts_->call(x);
  host::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
}

void HostBackend::do_relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = contexts_->call(y);
  host::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
}

// --- reductions ---

void HostBackend::do_sum_all(const Tensor& x, Tensor& out) {
  Call c = contexts_->call(x);
  out.data<float>()[0] = host::sum_all(c.ctx(), x.data<float>(), x.numel());
}

void HostBackend::do_argmax_rows(const Tensor& x, Tensor& out) {
  Call c = contexts_->call(x);
  host::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
}

bool HostBackend::do_all_finite(const Tensor& x) {
  Call c = contexts_->call(x);
  return host::all_finite(c.ctx(), x.data<float>(), x.numel());
}

// --- dense layers ---

void HostBackend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
  Call c = contexts_->call(x);
  const host::LinearShape s{x.size(0), x.size(1), w.size(0)};
  host::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                       y.data<float>());
}

void HostBackend::do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                                     Tensor& gw, Tensor& gb) {
  Call c = contexts_->call(x);
  const host::LinearShape s{x.size(0), x.size(1), w.size(0)};
  host::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                        data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void HostBackend::do_matmul(const Tensor& a, const Tensor& b, Tensor& out) {
  Call c = contexts_->call(a);
  host::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
               b.size(1));
}

// --- convolution and pooling ---

void HostBackend::do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                    const Conv2dParams& p, Tensor& y) {
  Call c = contexts_->call(x);
  host::conv2d_forward(c.ctx(), conv_shape(x, w, p, y), x.data<float>(), w.data<float>(),
                       data_or_null(b), y.data<float>());
}

void HostBackend::do_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                                     const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) {
  Call c = contexts_->call(x);
  host::conv2d_backward(c.ctx(), conv_shape(x, w, p, gy), x.data<float>(), w.data<float>(),
                        gy.data<float>(), data_or_null(gx), data_or_null(gw), data_or_null(gb));
}

void HostBackend::do_max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                        Tensor& workspace) {
  Call c = contexts_->call(x);
  host::max_pool2d_forward(c.ctx(), pool_shape(x, p, y), x.data<float>(), y.data<float>(),
                           workspace.data<int64_t>());
}

void HostBackend::do_max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                         const Pool2dParams& p, Tensor& gx) {
  Call c = contexts_->call(gy);
  host::max_pool2d_backward(c.ctx(), pool_shape(gx, p, gy), gy.data<float>(),
                            workspace.data<int64_t>(), gx.data<float>());
}

// --- batch normalisation ---

void HostBackend::do_batch_norm_forward_train(const Tensor& x, const Tensor& gamma,
                                              const Tensor& beta, float eps, Tensor& y,
                                              Tensor& mean, Tensor& var) {
  Call c = contexts_->call(x);
  host::batch_norm_forward_train(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                 data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                                 var.data<float>());
}

void HostBackend::do_batch_norm_forward_eval(const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, const Tensor& mean,
                                             const Tensor& var, float eps, Tensor& y) {
  Call c = contexts_->call(x);
  host::batch_norm_forward_eval(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                data_or_null(beta), mean.data<float>(), var.data<float>(), eps,
                                y.data<float>());
}

void HostBackend::do_batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                         const Tensor& mean, const Tensor& var, float eps,
                                         Tensor& gx, Tensor& ggamma, Tensor& gbeta) {
  Call c = contexts_->call(x);
  host::batch_norm_backward(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                            data_or_null(gamma), mean.data<float>(), var.data<float>(), eps,
                            gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
}

void HostBackend::do_channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) {
  Call c = contexts_->call(x);
  const host::BatchNormShape s = bn_shape(x);
  host::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                     s.s);
}

void HostBackend::do_channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                       Tensor& sum_gy, Tensor& sum_gy_xmu) {
  Call c = contexts_->call(x);
  const host::BatchNormShape s = bn_shape(x);
  host::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                          sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
}

void HostBackend::do_batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                      const Tensor& gamma, const Tensor& beta, Tensor& y) {
  Call c = contexts_->call(x);
  host::batch_norm_apply(c.ctx(), bn_shape(x), x.data<float>(), mean.data<float>(),
                         invstd.data<float>(), data_or_null(gamma), data_or_null(beta),
                         y.data<float>());
}

void HostBackend::do_batch_norm_backward_elemt(const Tensor& x, const Tensor& gy,
                                               const Tensor& mean, const Tensor& invstd,
                                               const Tensor& gamma, const Tensor& mean_gy,
                                               const Tensor& mean_gy_xmu, Tensor& gx) {
  Call c = contexts_->call(x);
  host::batch_norm_backward_elemt(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                                  mean.data<float>(), invstd.data<float>(), data_or_null(gamma),
                                  mean_gy.data<float>(), mean_gy_xmu.data<float>(),
                                  gx.data<float>());
}

// --- losses ---

void HostBackend::do_log_softmax_forward(const Tensor& x, Tensor& y) {
  Call c = contexts_->call(x);
  host::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
}

void HostBackend::do_log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) {
  Call c = contexts_->call(y);
  host::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                             y.size(0), y.size(1));
}

void HostBackend::do_nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) {
  Call c = contexts_->call(logp);
  out.data<float>()[0] = host::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(),
                                                logp.size(0), logp.size(1));
}

void HostBackend::do_nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) {
  Call c = contexts_->call(gx);
  host::nll_loss_backward(c.ctx(), gout.data<float>()[0], target.data<int64_t>(), gx.data<float>(),
                          gx.size(0), gx.size(1));
}

// --- dropout and optimizers ---

void HostBackend::do_dropout_mask(float p, uint64_t seed, Tensor& mask) {
  Call c = contexts_->call(mask);
  host::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
}

void HostBackend::do_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr,
                              float momentum, float dampening, float weight_decay, bool nesterov,
                              bool first) {
  Call c = contexts_->call(param);
  const host::SgdOptions o{lr, momentum, dampening, weight_decay, nesterov};
  host::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                 momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
}

void HostBackend::do_adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg,
                               Tensor& exp_avg_sq, float lr, float beta1, float beta2, float eps,
                               float weight_decay, int64_t step, bool adamw) {
  Call c = contexts_->call(param);
  const host::AdamOptions o{lr, beta1, beta2, eps, weight_decay, adamw};
  host::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                  exp_avg_sq.data<float>(), o, step, param.numel());
}

}  // namespace dpe
