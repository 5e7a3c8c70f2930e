// Backend: the narrow table of operations a device type implements (host: oneDNN and loops;
// cuda: cuBLAS, cuDNN and dpe's kernels). engine/autograd/ops.cc calls these to build
// differentiable ops; nothing above this layer knows how an op is computed.
//
// Contract for every method:
// - all tensors are on the same device (the one whose backend is called), contiguous, float32
//   unless stated; outputs are allocated by the caller with the documented shape;
// - the call runs on the calling thread, which should be the device's worker (so the host backend
//   uses that device's compute-thread count); the methods are thread-safe across devices;
// - shape/value errors that only a kernel can see (a label out of range) throw dpe::Error.
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

  // --- elementwise (same shapes) ---
  virtual void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) = 0;  // a + alpha*b
  virtual void mul(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void scale(const Tensor& a, float s, Tensor& out) = 0;  // s * a
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;  // gy * (y > 0)

  // --- reductions ---
  virtual void sum_all(const Tensor& x, Tensor& out) = 0;  // out: shape [] (a scalar)
  // Per-row argmax of x [N, C] into int64 out [N].
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;
  // True when every element is finite.
  virtual bool all_finite(const Tensor& x) = 0;

  // --- dense layers ---
  // y[N, O] = x[N, I] @ w[O, I]^T (+ b[O] when defined).
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // Any of gx [N, I], gw [O, I], gb [O] may be undefined: then it is not computed.
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                               Tensor& gw, Tensor& gb) = 0;
  // c[M, N] = a[M, K] @ b[K, N].
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& c) = 0;

  // --- convolution and pooling (NCHW) ---
  // x [N, C, H, W], w [O, C, kh, kw], b [O] or undefined, y [N, O, Ho, Wo].
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Conv2dParams& p, Tensor& y) = 0;
  virtual void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                               const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) = 0;
  // `indices` (int64, y's shape, allocated by the caller) receives the flat index within its
  // (n, c) plane of each output's maximum; backward scatters gy through them.
  virtual void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                  Tensor& workspace) = 0;
  virtual void max_pool2d_backward(const Tensor& gy, const Tensor& workspace,
                                   const Pool2dParams& p, Tensor& gx) = 0;

  // --- batch normalisation over (N, H, W) per channel C; x is [N, C] or [N, C, H, W] ---
  // Training: normalise with the batch mean and biased variance, written to mean/var [C].
  virtual void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        float eps, Tensor& y, Tensor& mean, Tensor& var) = 0;
  // Evaluation: normalise with the given statistics.
  virtual void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& mean, const Tensor& var, float eps,
                                       Tensor& y) = 0;
  // Gradients of the training forward (mean/var are the batch statistics it returned).
  virtual void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                   const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                                   Tensor& ggamma, Tensor& gbeta) = 0;
  // Building blocks of SyncBatchNorm (statistics reduced across ranks between the calls):
  // per-channel sum and sum of squares of x;
  virtual void channel_sums(const Tensor& x, Tensor& sum, Tensor& sumsq) = 0;
  // per-channel sum(gy) and sum(gy * (x - mean));
  virtual void channel_grad_sums(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                 Tensor& sum_gy, Tensor& sum_gy_xmu) = 0;
  // y = (x - mean) * invstd * gamma + beta;
  virtual void batch_norm_apply(const Tensor& x, const Tensor& mean, const Tensor& invstd,
                                const Tensor& gamma, const Tensor& beta, Tensor& y) = 0;
  // gx = (gy - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma.
  virtual void batch_norm_backward_elemt(const Tensor& x, const Tensor& gy, const Tensor& mean,
                                         const Tensor& invstd, const Tensor& gamma,
                                         const Tensor& mean_gy, const Tensor& mean_gy_xmu,
                                         Tensor& gx) = 0;

  // --- classification and regression losses ---
  // Row-wise log-softmax of x [N, C].
  virtual void log_softmax_forward(const Tensor& x, Tensor& y) = 0;
  virtual void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;
  // Mean negative log-likelihood of logp [N, C] at int64 targets [N]; out is a scalar [].
  // Throws "nll_loss: target <t> is out of bounds for <C> classes" for a bad label.
  virtual void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) = 0;
  // gx[i, target[i]] = -gout / N, zero elsewhere; gout is a scalar tensor.
  virtual void nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) = 0;

  // --- dropout: mask holds 0 or 1/(1-p); y = x * mask ---
  virtual void dropout_mask(float p, uint64_t seed, Tensor& mask) = 0;

  // --- optimizer updates (in place; PyTorch's formulas, see engine/optim) ---
  // buf is the momentum buffer (undefined when momentum == 0); `first` marks its first use.
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, float lr, float momentum,
                        float dampening, float weight_decay, bool nesterov, bool first) = 0;
  // Adam/AdamW; `step` counts from 1; decoupled weight decay when `adamw`.
  virtual void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         float lr, float beta1, float beta2, float eps, float weight_decay,
                         int64_t step, bool adamw) = 0;
};

// The backend of a device type: host is always there; cuda throws where it was not built.
Backend& backend_for(Device device);

}  // namespace dpe
