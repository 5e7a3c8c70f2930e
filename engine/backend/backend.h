// Backend: the narrow table of operations a device type implements (host: oneDNN and loops;
// cuda: cuBLAS, cuDNN and dpe's kernels). engine/autograd/ops.cc calls these to build
// differentiable ops; nothing above this layer knows how an op is computed.
//
// Contract for every method:
// - all tensors are on the same device (the one whose backend is called), contiguous, float32
//   unless stated; outputs are allocated by the caller with the documented shape;
// - Backend itself checks all of this (device type, one device, dtype, contiguity, every shape
//   below) before an implementation sees the arguments, and throws dpe::Error naming the op, the
//   devices and the shapes, with the same message on every device type;
// - the call runs on the calling thread, which should be the device's worker (so the host backend
//   uses that device's compute-thread count); the methods are thread-safe across devices;
// - shape/value errors that only a kernel can see (a label out of range) throw dpe::Error.
//
// Design note "validate once, in the interface": the public methods are not virtual. Each checks
// its arguments (backend.cc) and calls the private virtual do_<name> of the same arguments, which
// an implementation (host_backend.cc, cuda_backend.cc) overrides without checking again; the
// implementation keeps only what differs per device type: its per-device context and locking,
// and the launch.
#pragma once

#include <cstdint>
#include <memory>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

struct Conv2dParams {
  int64_t stride = 1;
  int64_t padding = 0;
};

struct Pool2dParams {
  int64_t kernel = 2;
  int64_t stride = 2;
  int64_t padding = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  // The device type whose tensors this backend takes ("the host backend got a tensor on cuda:0").
  DeviceType device_type() const { return type_; }

  // --- elementwise (same shapes) ---
  void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out);  // a + alpha*b
  void mul(const Tensor& a, const Tensor& b, Tensor& out);               // a * b
  void scale(const Tensor& a, float s, Tensor& out);                     // s * a
  void relu_forward(const Tensor& x, Tensor& y);                         // max(x, 0)
  void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx);     // gy * (y > 0)

  // --- reductions ---
  void sum_all(const Tensor& x, Tensor& out);  // out: shape [] (a scalar)
  // Per-row argmax of x [N, C] (C > 0) into int64 out [N].
  void argmax_rows(const Tensor& x, Tensor& out);
  // True when every element is finite.
  bool all_finite(const Tensor& x);

  // --- dense layers ---
  // y[N, O] = x[N, I] @ w[O, I]^T (+ b[O] when defined).
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  // Any of gx [N, I], gw [O, I], gb [O] may be undefined: then it is not computed.
  void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx, Tensor& gw,
                       Tensor& gb);
  // c[M, N] = a[M, K] @ b[K, N].
  void matmul(const Tensor& a, const Tensor& b, Tensor& c);

  // --- convolution and pooling (NCHW) ---
  // x [N, C, H, W], w [O, C, kh, kw], b [O] or undefined, y [N, O, Ho, Wo]. An empty batch
  // (N == 0) computes nothing; backward then zeroes gw and gb.
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dParams& p,
                      Tensor& y);
  // gy [N, O, Ho, Wo]; any of gx, gw, gb may be undefined: then it is not computed.
  void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy, const Conv2dParams& p,
                       Tensor& gx, Tensor& gw, Tensor& gb);
  // `workspace` (int64, y's shape, allocated by the caller) receives the flat index within its
  // (n, c) plane of each output's maximum; backward scatters gy through them.
  void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y, Tensor& workspace);
  void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                           Tensor& gx);  // gx [N, C, H, W] gives the input shape

  // --- batch normalisation over (N, H, W) per channel C; x is [N, C] or [N, C, H, W] ---
  // gamma/beta (and their gradients) [C] may be undefined: then 1 and 0 (not computed).
  // Training: normalise with the batch mean and biased variance, written to mean/var [C].
  void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                                Tensor& y, Tensor& mean, Tensor& var);
  // Evaluation: normalise with the given statistics (an empty x computes nothing).
  void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps, Tensor& y);
  // Gradients of the training forward (mean/var are the batch statistics it returned).
  void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                           const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                           Tensor& ggamma, Tensor& gbeta);
  // Building blocks of SyncBatchNorm (statistics reduced across ranks between the calls):
  // per-channel sum and sum of squares of x;
  void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq);
  // per-channel sum(gy) and sum(gy * (x - mean));
  void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean, Tensor& sum_gy,
                         Tensor& sum_gy_xmu);
  // y = (x - mean) * invstd * gamma + beta;
  void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                        const Tensor& gamma, const Tensor& beta, Tensor& y);
  // gx = (gy - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma.
  void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 const Tensor& invstd, const Tensor& gamma, const Tensor& mean_gy,
                                 const Tensor& mean_gy_xmu, Tensor& gx);

  // --- classification and regression losses ---
  // Row-wise log-softmax of x [N, C].
  void log_softmax_forward(const Tensor& x, Tensor& y);
  void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx);
  // Mean negative log-likelihood of logp [N, C] at int64 targets [N]; out is a scalar [].
  // Throws "nll_loss: target <t> is out of bounds for <C> classes" for a bad label.
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out);
  // gx[i, target[i]] = -gout / N, zero elsewhere; gout is a scalar tensor.
  void nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx);

  // --- dropout: mask holds 0 or 1/(1-p); y = x * mask ---
  void dropout_mask(float p, uint64_t seed, Tensor& mask);

  // --- optimizer updates (in place, versions bumped; PyTorch's formulas, see engine/optim) ---
  // buf is the momentum buffer (undefined when momentum == 0); `first` marks its first use.
  void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                float dampening, float weight_decay, bool nesterov, bool first);
  // Adam/AdamW; `step` counts from 1; decoupled weight decay when `adamw`.
  void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, float lr,
                 float beta1, float beta2, float eps, float weight_decay, int64_t step, bool adamw);

 protected:
  explicit Backend(DeviceType type) : type_(type) {}

 private:
  // The implementation's slots: do_<name> runs the public method <name> once its checks passed
  // (so every tensor is defined, on one device of device_type(), of the stated dtype, contiguous
  // and of the stated shape), and it does not re-check. Backend handles the empty conv2d batch,
  // the empty batch_norm_forward_eval input and the optimizers' version bumps.
  virtual void do_add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) = 0;
  virtual void do_mul(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void do_scale(const Tensor& a, float s, Tensor& out) = 0;
  virtual void do_relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;

  virtual void do_sum_all(const Tensor& x, Tensor& out) = 0;
  virtual void do_argmax_rows(const Tensor& x, Tensor& out) = 0;
  virtual bool do_all_finite(const Tensor& x) = 0;

  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  virtual void do_linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                                  Tensor& gw, Tensor& gb) = 0;
  virtual void do_matmul(const Tensor& a, const Tensor& b, Tensor& c) = 0;

  virtual void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                                 const Conv2dParams& p, Tensor& y) = 0;  // N > 0
  virtual void do_conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                                  const Conv2dParams& p, Tensor& gx, Tensor& gw,
                                  Tensor& gb) = 0;  // N > 0
  virtual void do_max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                     Tensor& workspace) = 0;
  virtual void do_max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                      const Pool2dParams& p, Tensor& gx) = 0;

  virtual void do_batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                           float eps, Tensor& y, Tensor& mean, Tensor& var) = 0;
  virtual void do_batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                          const Tensor& mean, const Tensor& var, float eps,
                                          Tensor& y) = 0;  // x not empty
  virtual void do_batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                      const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                                      Tensor& ggamma, Tensor& gbeta) = 0;
  virtual void do_channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) = 0;
  virtual void do_channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                    Tensor& sum_gy, Tensor& sum_gy_xmu) = 0;
  virtual void do_batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                   const Tensor& gamma, const Tensor& beta, Tensor& y) = 0;
  virtual void do_batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                            const Tensor& invstd, const Tensor& gamma,
                                            const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                            Tensor& gx) = 0;

  virtual void do_log_softmax_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;
  virtual void do_nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) = 0;
  virtual void do_nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) = 0;

  virtual void do_dropout_mask(float p, uint64_t seed, Tensor& mask) = 0;

  virtual void do_sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                           float dampening, float weight_decay, bool nesterov, bool first) = 0;
  virtual void do_adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                            float lr, float beta1, float beta2, float eps, float weight_decay,
                            int64_t step, bool adamw) = 0;

  const DeviceType type_;
};

// The backend of a device type: host is always there; cuda throws where it was not built.
Backend& backend_for(Device device);

}  // namespace dpe
