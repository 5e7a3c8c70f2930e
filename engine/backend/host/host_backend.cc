// The host device type's table of operations: every slot calls one of the host kernels
// (kernels/host, oneDNN and loops) with the device's HostContext, held under the device's lock for
// the call. The validating front (engine/backend/checked_backend.cc) has checked the arguments.
//
// Threading contract: every slot may be called from any thread; calls on one device are serialised
// by its context's lock, calls on different devices run in parallel.
#include "engine/backend/host/host_backend.h"

#include <mutex>

#include "engine/backend/host/host_device.h"
#include "kernels/host/batch_norm.h"
#include "kernels/host/bmm.h"
#include "kernels/host/conv2d.h"
#include "kernels/host/dropout.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/embedding.h"
#include "kernels/host/gelu.h"
#include "kernels/host/host_context.h"
#include "kernels/host/layer_norm.h"
#include "kernels/host/linear.h"
#include "kernels/host/log_softmax.h"
#include "kernels/host/matmul.h"
#include "kernels/host/max_pool2d.h"
#include "kernels/host/nll_loss.h"
#include "kernels/host/optim_step.h"
#include "kernels/host/reduce.h"
#include "kernels/host/softmax.h"

namespace dpe {

namespace {

// One backend call: the HostContext of the device of `t`, locked until the call returns.
class Call {
 public:
  explicit Call(const Tensor& t) : device_(as_host(t.context())), lock_(device_.lock_kernels()) {}

  host::HostContext& ctx() { return device_.kernels(); }

 private:
  HostDeviceContext& device_;
  std::unique_lock<std::mutex> lock_;
};

float* data_or_null(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// The kernels' views of checked arguments: x [N, C, ...] as [N, C, S]; x [..., D] as [N, D]; a convolution of
// x [N, C, H, W] by w [O, C, kh, kw] into y [N, O, Ho, Wo]; pooling of x into y [N, C, Ho, Wo].
BatchNormShape bn_shape(const Tensor& x) {
  int64_t s = 1;
  for (int64_t d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}
LayerNormShape ln_shape(const Tensor& x) { return {x.numel() / x.size(-1), x.size(-1)}; }
// x [..., Tq, Tk] as [B, Tq, Tk]; a 1-D x is one query.
SoftmaxShape softmax_shape(const Tensor& x, bool causal) {
  const int64_t tk = x.size(-1), tq = x.dim() >= 2 ? x.size(-2) : 1;
  return {tq * tk > 0 ? x.numel() / (tq * tk) : 0, tq, tk, causal};
}
Conv2dShape conv_shape(const Tensor& x, const Tensor& w, const Conv2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), w.size(0), w.size(2),
          w.size(3), p.stride,  p.padding, y.size(2), y.size(3)};
}
Pool2dShape pool_shape(const Tensor& x, const Pool2dParams& p, const Tensor& y) {
  return {x.size(0), x.size(1), x.size(2), x.size(3), p.kernel,
          p.stride,  p.padding, y.size(2), y.size(3)};
}

class HostBackend final : public Backend {
 public:
  // --- elementwise ---

  void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override {
    Call c(a);
    host::add_forward(c.ctx(), a.data<float>(), b.data<float>(), alpha, out.data<float>(),
                      a.numel());
  }

  void mul(const Tensor& a, const Tensor& b, Tensor& out) override {
    Call c(a);
    host::mul_forward(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.numel());
  }

  void scale(const Tensor& a, float s, Tensor& out) override {
    Call c(a);
    host::scale_forward(c.ctx(), a.data<float>(), s, out.data<float>(), a.numel());
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    host::relu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
  }

  void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    host::relu_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(), y.numel());
  }

  void gelu_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    host::gelu_forward(c.ctx(), x.data<float>(), y.data<float>(), x.numel());
  }

  void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) override {
    Call c(x);
    host::gelu_backward(c.ctx(), x.data<float>(), gy.data<float>(), gx.data<float>(), x.numel());
  }

  // --- reductions ---

  void sum_all(const Tensor& x, Tensor& out) override {
    Call c(x);
    out.data<float>()[0] = host::sum_all(c.ctx(), x.data<float>(), x.numel());
  }

  void argmax_rows(const Tensor& x, Tensor& out) override {
    Call c(x);
    host::argmax_rows(c.ctx(), x.data<float>(), out.data<int64_t>(), x.size(0), x.size(1));
  }

  bool all_finite(const Tensor& x) override {
    Call c(x);
    return host::all_finite(c.ctx(), x.data<float>(), x.numel());
  }

  // --- dense layers ---

  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    Call c(x);
    const LinearShape s{x.size(0), x.size(1), w.size(0)};
    host::linear_forward(c.ctx(), s, x.data<float>(), w.data<float>(), data_or_null(b),
                         y.data<float>());
  }

  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx, Tensor& gw,
                       Tensor& gb, float param_grad_scale) override {
    Call c(x);
    const LinearShape s{x.size(0), x.size(1), w.size(0)};
    host::linear_backward(c.ctx(), s, x.data<float>(), w.data<float>(), gy.data<float>(),
                          data_or_null(gx), data_or_null(gw), data_or_null(gb), param_grad_scale);
  }

  void matmul(const Tensor& a, const Tensor& b, Tensor& out) override {
    Call c(a);
    host::matmul(c.ctx(), a.data<float>(), b.data<float>(), out.data<float>(), a.size(0), a.size(1),
                 b.size(1));
  }

  void bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& out) override {
    Call c(a);
    const BmmShape s{a.size(0), out.size(1), out.size(2), a.size(trans_a ? 1 : 2), trans_a,
                     trans_b};
    host::bmm(c.ctx(), s, a.data<float>(), b.data<float>(), out.data<float>());
  }

  // --- embedding ---

  void embedding_forward(const Tensor& weight, const Tensor& index, Tensor& y) override {
    Call c(weight);
    host::embedding_forward(c.ctx(), weight.data<float>(), index.data<int64_t>(), y.data<float>(),
                            index.size(0), weight.size(0), weight.size(1));
  }

  void embedding_backward(const Tensor& index, const Tensor& gy, Tensor& gw) override {
    Call c(gw);
    host::embedding_backward(c.ctx(), index.data<int64_t>(), gy.data<float>(), gw.data<float>(),
                             index.size(0), gw.size(0), gw.size(1));
  }

  // --- convolution and pooling ---

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                      Tensor& y) override {
    Call c(x);
    host::conv2d_forward(c.ctx(), conv_shape(x, w, p, y), x.data<float>(), w.data<float>(),
                         data_or_null(b), y.data<float>());
  }

  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                       Tensor& gx, Tensor& gw, Tensor& gb) override {
    Call c(x);
    host::conv2d_backward(c.ctx(), conv_shape(x, w, p, gy), x.data<float>(), w.data<float>(),
                          gy.data<float>(), data_or_null(gx), data_or_null(gw), data_or_null(gb));
  }

  void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                          Tensor& workspace) override {
    Call c(x);
    host::max_pool2d_forward(c.ctx(), pool_shape(x, p, y), x.data<float>(), y.data<float>(),
                             workspace.data<int64_t>());
  }

  void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                           Tensor& gx) override {
    Call c(gy);
    host::max_pool2d_backward(c.ctx(), pool_shape(gx, p, gy), gy.data<float>(),
                              workspace.data<int64_t>(), gx.data<float>());
  }

  // --- batch normalisation ---

  void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                Tensor& y, Tensor& mean, Tensor& var) override {
    Call c(x);
    host::batch_norm_forward_train(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                   data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                                   var.data<float>());
  }

  void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps,
                               Tensor& y) override {
    Call c(x);
    host::batch_norm_forward_eval(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                  data_or_null(beta), mean.data<float>(), var.data<float>(), eps,
                                  y.data<float>());
  }

  void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                           Tensor& ggamma, Tensor& gbeta) override {
    Call c(x);
    host::batch_norm_backward(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                              data_or_null(gamma), mean.data<float>(), var.data<float>(), eps,
                              gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }

  void batch_norm_relu_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, Tensor& y, Tensor& mean, Tensor& var) override {
    Call c(x);
    host::batch_norm_forward_train(c.ctx(), bn_shape(x), x.data<float>(), data_or_null(gamma),
                                   data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                                   var.data<float>(), /*relu=*/true);
  }

  void batch_norm_relu_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                const Tensor& beta, const Tensor& mean, const Tensor& var,
                                float eps, Tensor& gx, Tensor& ggamma, Tensor& gbeta) override {
    Call c(x);
    host::batch_norm_relu_backward(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                                   data_or_null(gamma), data_or_null(beta), mean.data<float>(),
                                   var.data<float>(), eps, gx.data<float>(), data_or_null(ggamma),
                                   data_or_null(gbeta));
  }

  void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override {
    Call c(x);
    const BatchNormShape s = bn_shape(x);
    host::channel_sums(c.ctx(), x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c,
                       s.s);
  }

  void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                         Tensor& sum_gy_xmu) override {
    Call c(x);
    const BatchNormShape s = bn_shape(x);
    host::channel_grad_sums(c.ctx(), x.data<float>(), gy.data<float>(), mean.data<float>(),
                            sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
  }

  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& gamma, const Tensor& beta, Tensor& y) override {
    Call c(x);
    host::batch_norm_apply(c.ctx(), bn_shape(x), x.data<float>(), mean.data<float>(),
                           invstd.data<float>(), data_or_null(gamma), data_or_null(beta),
                           y.data<float>());
  }

  void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& gamma, const Tensor& mean_gy,
                                 const Tensor& mean_gy_xmu, Tensor& gx) override {
    Call c(x);
    host::batch_norm_backward_elemt(c.ctx(), bn_shape(x), x.data<float>(), gy.data<float>(),
                                    mean.data<float>(), invstd.data<float>(), data_or_null(gamma),
                                    mean_gy.data<float>(), mean_gy_xmu.data<float>(),
                                    gx.data<float>());
  }

  // --- layer normalisation ---

  void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd) override {
    Call c(x);
    host::layer_norm_forward(c.ctx(), ln_shape(x), x.data<float>(), data_or_null(gamma),
                             data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                             rstd.data<float>());
  }

  void layer_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& rstd, Tensor& gx, Tensor& ggamma,
                           Tensor& gbeta) override {
    Call c(x);
    host::layer_norm_backward(c.ctx(), ln_shape(x), x.data<float>(), gy.data<float>(),
                              data_or_null(gamma), mean.data<float>(), rstd.data<float>(),
                              gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }

  // --- softmax ---

  void softmax_forward(const Tensor& x, bool causal, Tensor& y) override {
    Call c(x);
    host::softmax_forward(c.ctx(), softmax_shape(x, causal), x.data<float>(), y.data<float>());
  }

  void softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    const int64_t cols = y.size(-1);
    host::softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                           cols > 0 ? y.numel() / cols : 0, cols);
  }

  // --- losses ---

  void log_softmax_forward(const Tensor& x, Tensor& y) override {
    Call c(x);
    host::log_softmax_forward(c.ctx(), x.data<float>(), y.data<float>(), x.size(0), x.size(1));
  }

  void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override {
    Call c(y);
    host::log_softmax_backward(c.ctx(), y.data<float>(), gy.data<float>(), gx.data<float>(),
                               y.size(0), y.size(1));
  }

  void nll_loss_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                        Tensor& out) override {
    Call c(logp);
    out.data<float>()[0] =
        host::nll_loss_forward(c.ctx(), logp.data<float>(), target.data<int64_t>(), logp.size(0),
                               logp.size(1), ignore_index);
  }

  void nll_loss_backward(const Tensor& gout, const Tensor& target, int64_t ignore_index,
                         Tensor& gx) override {
    Call c(gx);
    host::nll_loss_backward(c.ctx(), gout.data<float>()[0], target.data<int64_t>(),
                            gx.data<float>(), gx.size(0), gx.size(1), ignore_index);
  }

  // --- dropout and optimizers ---

  void dropout_mask(float p, uint64_t seed, Tensor& mask) override {
    Call c(mask);
    host::dropout_mask(c.ctx(), p, seed, mask.data<float>(), mask.numel());
  }

  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdOptions& o,
                bool first) override {
    Call c(param);
    host::sgd_step(c.ctx(), param.data<float>(), grad.data<float>(),
                   o.momentum != 0.0f ? buf.data<float>() : nullptr, o, first, param.numel());
  }

  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                 const AdamOptions& o, int64_t step) override {
    Call c(param);
    host::adam_step(c.ctx(), param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
                    exp_avg_sq.data<float>(), o, step, param.numel());
  }
};

}  // namespace

Backend& host_backend() {
  static HostBackend backend;
  return backend;
}

}  // namespace dpe
