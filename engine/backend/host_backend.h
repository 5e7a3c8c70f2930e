// HostBackend: the Backend of host devices, oneDNN and loops (kernels/host). Backend has checked
// the arguments (backend.cc); each do_<name> calls the kernel with the device's HostContext.
//
// Design note "one HostContext per host device": the backend keeps one HostContext (oneDNN
// engine, stream, primitive cache) per host device index, created on first use. A call holds its
// device's context for its duration, so calls on one device are serialised (they are anyway: a
// device's work runs on its worker) while calls on different devices run in parallel.
//
// Threading contract: every method may be called from any thread; the kernels use the OpenMP
// thread count of the calling thread (a host device's worker sets it to the device's count).
#pragma once

#include <memory>

#include "engine/backend/backend.h"

namespace dpe {

class HostBackend final : public Backend {
 public:
  HostBackend();
  ~HostBackend() override;

 private:
  void do_add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) override;
  void do_mul(const Tensor& a, const Tensor& b, Tensor& out) override;
  void do_scale(const Tensor& a, float s, Tensor& out) override;
  void do_relu_forward(const Tensor& x, Tensor& y) override;
  void do_relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;

  void do_sum_all(const Tensor& x, Tensor& out) override;
  void do_argmax_rows(const Tensor& x, Tensor& out) override;
  bool do_all_finite(const Tensor& x) override;

  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override;
  void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                          Tensor& gw, Tensor& gb) override;
  void do_matmul(const Tensor& a, const Tensor& b, Tensor& c) override;

  void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                         Tensor& y) override;
  void do_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                          Tensor& gx, Tensor& gw, Tensor& gb) override;
  void do_max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                             Tensor& workspace) override;
  void do_max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                              Tensor& gx) override;

  void do_batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                   float eps, Tensor& y, Tensor& mean, Tensor& var) override;
  void do_batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  const Tensor& mean, const Tensor& var, float eps,
                                  Tensor& y) override;
  void do_batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                              const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                              Tensor& ggamma, Tensor& gbeta) override;
  void do_channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) override;
  void do_channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                            Tensor& sum_gy_xmu) override;
  void do_batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                           const Tensor& gamma, const Tensor& beta, Tensor& y) override;
  void do_batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                    const Tensor& invstd, const Tensor& gamma,
                                    const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                    Tensor& gx) override;

  void do_log_softmax_forward(const Tensor& x, Tensor& y) override;
  void do_log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) override;
  void do_nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) override;
  void do_nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) override;

  void do_dropout_mask(float p, uint64_t seed, Tensor& mask) override;

  void do_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                   float dampening, float weight_decay, bool nesterov, bool first) override;
  void do_adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                    float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                    bool adamw) override;

  struct Contexts;  // the per-device HostContexts (host_backend.cc)
  std::unique_ptr<Contexts> contexts_;
};

}  // namespace dpe
