// Softmax and classification-loss prims. See prims.h for what a prim declares.
#pragma once

#include <cstdint>

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/backend/prims/views.h"
#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe::prim {

// Softmax over the last dim: x [..., Tq, Tk] viewed as [B, Tq, Tk] (Tq = 1 for 1-D x). When
// causal (x at least 2-D), entries with k > q + (Tk - Tq) are excluded: exactly 0 in y, and a row
// with no entry left (Tq > Tk) is all 0.
struct SoftmaxForward {
  static constexpr const char* kName = "softmax";
  const Tensor& x;
  bool causal;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    softmax_forward(ctx, softmax_view(x, causal), x.data<float>(), y.data<float>());
  }
};

// gx = y * (gy - sum(gy * y)) per row of the last dim, y the forward's output.
struct SoftmaxBackward {
  static constexpr const char* kName = "softmax_backward";
  const Tensor& y;
  const Tensor& gy;
  Tensor& gx;

  const Tensor& first() const { return y; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    const int64_t cols = y.size(-1);
    softmax_backward(ctx, y.data<float>(), gy.data<float>(), gx.data<float>(),
                     cols > 0 ? y.numel() / cols : 0, cols);
  }
};

// Row-wise log-softmax of x [N, C].
struct LogSoftmaxForward {
  static constexpr const char* kName = "log_softmax";
  const Tensor& x;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    log_softmax_forward(ctx, x.data<float>(), y.data<float>(), x.size(0), x.size(1));
  }
};

struct LogSoftmaxBackward {
  static constexpr const char* kName = "log_softmax_backward";
  const Tensor& y;
  const Tensor& gy;
  Tensor& gx;

  const Tensor& first() const { return y; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    log_softmax_backward(ctx, y.data<float>(), gy.data<float>(), gx.data<float>(), y.size(0),
                         y.size(1));
  }
};

// Mean negative log-likelihood of logp [N, C] at int64 targets [N] over the targets that are not
// ignore_index (NaN when none is left, as PyTorch); out is a scalar []. The kernel throws
// "nll_loss: target <t> is out of bounds for <C> classes" for a bad label.
struct NllLossForward {
  static constexpr const char* kName = "nll_loss";
  const Tensor& logp;
  const Tensor& target;
  int64_t ignore_index;
  Tensor& out;

  const Tensor& first() const { return logp; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    nll_loss_forward(ctx, logp.data<float>(), target.data<int64_t>(), out.data<float>(),
                     logp.size(0), logp.size(1), ignore_index);
  }
};

// gx[i, target[i]] = -gout / (targets counted) where target[i] != ignore_index, zero elsewhere;
// gout is a scalar tensor.
struct NllLossBackward {
  static constexpr const char* kName = "nll_loss_backward";
  const Tensor& gout;
  const Tensor& target;
  int64_t ignore_index;
  Tensor& gx;

  const Tensor& first() const { return gx; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    nll_loss_backward(ctx, gout.data<float>(), target.data<int64_t>(), gx.data<float>(), gx.size(0),
                      gx.size(1), ignore_index);
  }
};

// log_softmax then nll_loss as one op (torch's cross_entropy): logits [N, C], int64 targets [N],
// the mean loss into the scalar out and each row's log-sum-exp into lse [N] for the backward.
// Optional: ops::cross_entropy asks supports<CrossEntropyForward>(device) and takes the two ops
// apart where it is missing.
struct CrossEntropyForward {
  static constexpr const char* kName = "cross_entropy";
  static constexpr bool kOptional = true;
  const Tensor& logits;
  const Tensor& target;
  int64_t ignore_index;
  Tensor& out;
  Tensor& lse;

  const Tensor& first() const { return logits; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    cross_entropy_forward(ctx, logits.data<float>(), target.data<int64_t>(), out.data<float>(),
                          lse.data<float>(), logits.size(0), logits.size(1), ignore_index);
  }
  // 16-bit logits read through a conversion; out and lse stay float32.
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    cross_entropy_forward_lowp(ctx, logits.dtype(), logits.raw_data(), target.data<int64_t>(),
                               out.data<float>(), lse.data<float>(), logits.size(0),
                               logits.size(1), ignore_index);
  }
};

// Its gradient with respect to the logits, from the forward's lse and the loss's scalar gradient.
struct CrossEntropyBackward {
  static constexpr const char* kName = "cross_entropy_backward";
  static constexpr bool kOptional = true;
  const Tensor& logits;
  const Tensor& target;
  const Tensor& lse;
  const Tensor& gout;
  int64_t ignore_index;
  Tensor& gx;

  const Tensor& first() const { return logits; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    cross_entropy_backward(ctx, logits.data<float>(), target.data<int64_t>(), lse.data<float>(),
                           gout.data<float>(), gx.data<float>(), logits.size(0), logits.size(1),
                           ignore_index);
  }
  // gx in the logits' 16-bit dtype; lse and gout float32.
  static constexpr bool kLowPrecision = true;
  template <class Ctx>
  void launch_lowp(Ctx& ctx) const {
    cross_entropy_backward_lowp(ctx, logits.dtype(), logits.raw_data(), target.data<int64_t>(),
                                lse.data<float>(), gout.data<float>(), gx.raw_data(),
                                logits.size(0), logits.size(1), ignore_index);
  }
};

}  // namespace dpe::prim
