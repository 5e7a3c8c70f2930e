// Backend: the table of operations on tensors a device type implements (host: oneDNN and loops in
// engine/backend/host; cuda: cuBLAS, cuDNN and dpe's kernels in engine/backend/cuda). The ops of
// engine/autograd, the optimizers and SyncBatchNorm call it; nothing above this layer knows how an
// op is computed. Memory, copies, fills and synchronisation are the other half of a device type:
// its DeviceContext (engine/device/device_context.h).
//
// Design note "validate once, in front of the table": backend_for(device) returns the device
// type's table behind a validating front (checked_backend.cc) that checks every call before an
// implementation sees it: all tensors defined, on one device of the backend's type, contiguous,
// float32 unless stated, of the shapes documented below; errors are dpe::Error naming the op, the
// devices and the shapes, with the same text on every device type. An implementation therefore
// overrides each slot once and checks nothing; only what a kernel alone can see (a label out of
// range) it reports itself. The front also handles empty conv2d batches and empty batch-norm
// evaluation inputs, and bumps the version of every tensor an optimizer updates in place. Adding an
// op: one slot here, its checks in checked_backend.cc, one override per device type.
//
// Threading contract: every slot may be called from any thread, concurrently across devices; calls
// on one device are serialised by its context. A call runs on the calling thread, which should be
// the device's worker (so the host backend uses that device's compute-thread count); outputs are
// allocated by the caller with the documented shape.
#pragma once

#include <cstdint>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe {

class Backend {
 public:
  virtual ~Backend() = default;

  // --- elementwise (same shapes) ---
  virtual void add(const Tensor& a, const Tensor& b, float alpha, Tensor& out) = 0;  // a + alpha*b
  virtual void mul(const Tensor& a, const Tensor& b, Tensor& out) = 0;               // a * b
  virtual void scale(const Tensor& a, float s, Tensor& out) = 0;                     // s * a
  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;                         // max(x, 0)
  virtual void relu_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;     // gy * (y > 0)
  // GELU, tanh form (PyTorch's approximate='tanh'); the backward reads the forward's input x.
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& gy, Tensor& gx) = 0;

  // --- reductions ---
  virtual void sum_all(const Tensor& x, Tensor& out) = 0;  // out: shape [] (a scalar)
  // Per-row argmax of x [N, C] (C > 0) into int64 out [N].
  virtual void argmax_rows(const Tensor& x, Tensor& out) = 0;
  // True when every element is finite.
  virtual bool all_finite(const Tensor& x) = 0;

  // --- dense layers ---
  // y[N, O] = x[N, I] @ w[O, I]^T (+ b[O] when defined).
  virtual void linear_forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) = 0;
  // Any of gx [N, I], gw [O, I], gb [O] may be undefined: then it is not computed. gw and gb are
  // multiplied by param_grad_scale (1: the plain gradients; DDP's 1/world when they are written
  // straight into its buckets, design note "gradient destinations" in engine/autograd/node.h).
  virtual void linear_backward(const Tensor& x, const Tensor& w, const Tensor& gy, Tensor& gx,
                               Tensor& gw, Tensor& gb, float param_grad_scale) = 0;
  // c[M, N] = a[M, K] @ b[K, N].
  virtual void matmul(const Tensor& a, const Tensor& b, Tensor& c) = 0;
  // c[B, M, N] = op(a) @ op(b) per batch: a is [B, M, K] ([B, K, M] when trans_a, op = transpose),
  // b is [B, K, N] ([B, N, K] when trans_b). Transposes are read in place, never copied.
  virtual void bmm(const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, Tensor& c) = 0;

  // --- embedding: row i of y [N, D] is row index[i] of weight [V, D]; index is int64 [N] ---
  // Throws "embedding: index <i> is out of range for <V> rows" for an index outside [0, V).
  virtual void embedding_forward(const Tensor& weight, const Tensor& index, Tensor& y) = 0;
  // gw [V, D] = 0, then gw[index[i]] += gy[i] for every i (repeated indices accumulate).
  virtual void embedding_backward(const Tensor& index, const Tensor& gy, Tensor& gw) = 0;

  // --- convolution and pooling (NCHW) ---
  // x [N, C, H, W] (N > 0), w [O, C, kh, kw], b [O] or undefined, y [N, O, Ho, Wo].
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                              const Conv2dParams& p, Tensor& y) = 0;
  // gy [N, O, Ho, Wo] (N > 0); any of gx, gw, gb may be undefined: then it is not computed.
  virtual void conv2d_backward(const Tensor& x, const Tensor& w, const Tensor& gy,
                               const Conv2dParams& p, Tensor& gx, Tensor& gw, Tensor& gb) = 0;
  // `workspace` (int64, y's shape) receives the flat index within its (n, c) plane of each output's
  // maximum; backward scatters gy through them into gx [N, C, H, W] (which gives the input shape).
  virtual void max_pool2d_forward(const Tensor& x, const Pool2dParams& p, Tensor& y,
                                  Tensor& workspace) = 0;
  virtual void max_pool2d_backward(const Tensor& gy, const Tensor& workspace, const Pool2dParams& p,
                                   Tensor& gx) = 0;

  // --- batch normalisation over (N, H, W) per channel C; x is [N, C] or [N, C, H, W] ---
  // gamma/beta (and their gradients) [C] may be undefined: then 1 and 0 (not computed).
  // Training: normalise with the batch mean and biased variance, written to mean/var [C].
  virtual void batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                        float eps, Tensor& y, Tensor& mean, Tensor& var) = 0;
  // Evaluation: normalise with the given statistics (x is not empty).
  virtual void batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& mean, const Tensor& var, float eps,
                                       Tensor& y) = 0;
  // Gradients of the training forward (mean/var are the batch statistics it returned).
  virtual void batch_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                   const Tensor& mean, const Tensor& var, float eps, Tensor& gx,
                                   Tensor& ggamma, Tensor& gbeta) = 0;
  // A training batch norm followed by a ReLU, y = max(batch_norm(x), 0), as one op: no
  // intermediate tensor, and no separate ReLU pass either way (nn::Sequential and the models fuse
  // a BatchNorm2d followed by a ReLU into it, engine/nn/fusion.h).
  virtual void batch_norm_relu_forward_train(const Tensor& x, const Tensor& gamma,
                                             const Tensor& beta, float eps, Tensor& y, Tensor& mean,
                                             Tensor& var) = 0;
  // Its gradients: the ReLU's mask is the forward's (y > 0), recomputed from x and the statistics.
  virtual void batch_norm_relu_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                        const Tensor& beta, const Tensor& mean, const Tensor& var,
                                        float eps, Tensor& gx, Tensor& ggamma, Tensor& gbeta) = 0;
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

  // --- layer normalisation over the last dim: x [..., D] (D > 0) viewed as [N, D] ---
  // gamma/beta [D] may be undefined (1 and 0). Writes y and, per row, mean and
  // rstd = 1 / sqrt(biased var + eps), both [N], which the backward reads.
  virtual void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                  float eps, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  // gx has x's shape; ggamma/gbeta [D] may be undefined: then they are not computed.
  virtual void layer_norm_backward(const Tensor& x, const Tensor& gy, const Tensor& gamma,
                                   const Tensor& mean, const Tensor& rstd, Tensor& gx,
                                   Tensor& ggamma, Tensor& gbeta) = 0;

  // --- softmax over the last dim: x [..., Tq, Tk] viewed as [B, Tq, Tk] (Tq = 1 for 1-D x) ---
  // When causal (x at least 2-D), entries with k > q + (Tk - Tq) are excluded: exactly 0 in y,
  // and a row with no entry left (Tq > Tk) is all 0.
  virtual void softmax_forward(const Tensor& x, bool causal, Tensor& y) = 0;
  // gx = y * (gy - sum(gy * y)) per row of the last dim, y the forward's output.
  virtual void softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;

  // --- classification losses ---
  // Row-wise log-softmax of x [N, C].
  virtual void log_softmax_forward(const Tensor& x, Tensor& y) = 0;
  virtual void log_softmax_backward(const Tensor& y, const Tensor& gy, Tensor& gx) = 0;
  // Mean negative log-likelihood of logp [N, C] at int64 targets [N] over the targets that are
  // not ignore_index (NaN when none is left, as PyTorch); out is a scalar [].
  // Throws "nll_loss: target <t> is out of bounds for <C> classes" for a bad label.
  virtual void nll_loss_forward(const Tensor& logp, const Tensor& target, int64_t ignore_index,
                                Tensor& out) = 0;
  // gx[i, target[i]] = -gout / (targets counted) where target[i] != ignore_index, zero elsewhere;
  // gout is a scalar tensor.
  virtual void nll_loss_backward(const Tensor& gout, const Tensor& target, int64_t ignore_index,
                                 Tensor& gx) = 0;
  // The same with PyTorch's default ignore_index, -100.
  void nll_loss_forward(const Tensor& logp, const Tensor& target, Tensor& out) {
    nll_loss_forward(logp, target, kDefaultIgnoreIndex, out);
  }
  void nll_loss_backward(const Tensor& gout, const Tensor& target, Tensor& gx) {
    nll_loss_backward(gout, target, kDefaultIgnoreIndex, gx);
  }

  // --- dropout: mask holds 0 or 1/(1-p), a function of `seed` alone; y = x * mask ---
  virtual void dropout_mask(float p, uint64_t seed, Tensor& mask) = 0;

  // --- optimizer updates, in place (torch.optim's formulas, kernels/op_params.h) ---
  // buf is the momentum buffer (undefined when momentum == 0); `first` marks its first use.
  virtual void sgd_step(Tensor& param, const Tensor& grad, Tensor& buf, const SgdOptions& o,
                        bool first) = 0;
  // `step` counts from 1.
  virtual void adam_step(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const AdamOptions& o, int64_t step) = 0;
};

// The table of `device`'s type behind the validating front. host is always there; cuda throws
// "cuda backend: dpe was built without CUDA" where it was not built.
Backend& backend_for(Device device);

}  // namespace dpe
