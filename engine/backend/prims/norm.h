// Normalisation prims: batch norm over (N, H, W) per channel C (x [N, C] or [N, C, H, W]), the
// building blocks of SyncBatchNorm, batch norm fused with a ReLU (and with a residual sum before
// the ReLU, or a max pooling after it), layer norm over the last dim. gamma/beta (and their
// gradients) may be undefined: then 1 and 0 (not computed). See prims.h for what a prim declares.
#pragma once

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/backend/prims/views.h"
#include "engine/tensor/tensor.h"

namespace dpe::prim {

// Training: normalise with the batch mean and biased variance, written to mean/var [C].
struct BatchNormForwardTrain {
  static constexpr const char* kName = "batch_norm";
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  Tensor& y;
  Tensor& mean;
  Tensor& var;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_forward_train(ctx, channels_view(x), x.data<float>(), data_or_null(gamma),
                             data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                             var.data<float>());
  }
};

// Evaluation: normalise with the given statistics. An empty x needs no kernel. Traced apart from
// the training forward, whose name is batch norm's own.
struct BatchNormForwardEval {
  static constexpr const char* kName = "batch_norm_eval";
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  const Tensor& mean;
  const Tensor& var;
  float eps;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  bool short_circuit() const { return x.numel() == 0; }
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_forward_eval(ctx, channels_view(x), x.data<float>(), data_or_null(gamma),
                            data_or_null(beta), mean.data<float>(), var.data<float>(), eps,
                            y.data<float>());
  }
};

// Gradients of the training forward (mean/var are the batch statistics it returned).
struct BatchNormBackward {
  static constexpr const char* kName = "batch_norm_backward";
  const Tensor& x;
  const Tensor& gy;
  const Tensor& gamma;
  const Tensor& mean;
  const Tensor& var;
  float eps;
  Tensor& gx;
  Tensor& ggamma;
  Tensor& gbeta;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_backward(ctx, channels_view(x), x.data<float>(), gy.data<float>(),
                        data_or_null(gamma), mean.data<float>(), var.data<float>(), eps,
                        gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }
};

// A training batch norm followed by a ReLU, y = max(batch_norm(x), 0), as one op: no
// intermediate tensor, and no separate ReLU pass either way (engine/nn/fusion.h). Optional: the
// fusion asks supports<BatchNormReluForwardTrain>(device) first.
struct BatchNormReluForwardTrain {
  static constexpr const char* kName = "batch_norm_relu";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  Tensor& y;
  Tensor& mean;
  Tensor& var;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_relu_forward(ctx, channels_view(x), x.data<float>(), data_or_null(gamma),
                            data_or_null(beta), eps, y.data<float>(), mean.data<float>(),
                            var.data<float>());
  }
};

// Its gradients: the ReLU's mask is the forward's (y > 0), recomputed from x and the statistics.
struct BatchNormReluBackward {
  static constexpr const char* kName = "batch_norm_relu_backward";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& gy;
  const Tensor& gamma;
  const Tensor& beta;
  const Tensor& mean;
  const Tensor& var;
  float eps;
  Tensor& gx;
  Tensor& ggamma;
  Tensor& gbeta;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_relu_backward(ctx, channels_view(x), x.data<float>(), gy.data<float>(),
                             data_or_null(gamma), data_or_null(beta), mean.data<float>(),
                             var.data<float>(), eps, gx.data<float>(), data_or_null(ggamma),
                             data_or_null(gbeta));
  }
};

// The end of a ResNet block, y = max(batch_norm(x) + residual, 0), as one op in training: no
// tensor between the three, and no separate sum or ReLU pass (engine/nn/fusion.h). Optional, as
// the batch norm + ReLU pair.
struct BatchNormAddReluForwardTrain {
  static constexpr const char* kName = "batch_norm_add_relu";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& residual;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  Tensor& y;
  Tensor& mean;
  Tensor& var;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_add_relu_forward(ctx, channels_view(x), x.data<float>(), residual.data<float>(),
                                data_or_null(gamma), data_or_null(beta), eps, y.data<float>(),
                                mean.data<float>(), var.data<float>());
  }
};

// Its gradients from gy and the forward's output y (the ReLU's mask, y > 0): gx, the residual's
// (gy masked, which is also what reaches the batch norm) and the parameters'.
struct BatchNormAddReluBackward {
  static constexpr const char* kName = "batch_norm_add_relu_backward";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& y;
  const Tensor& gy;
  const Tensor& gamma;
  const Tensor& mean;
  const Tensor& var;
  float eps;
  Tensor& gx;
  Tensor& gresidual;
  Tensor& ggamma;
  Tensor& gbeta;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_add_relu_backward(ctx, channels_view(x), x.data<float>(), y.data<float>(),
                                 gy.data<float>(), data_or_null(gamma), mean.data<float>(),
                                 var.data<float>(), eps, gx.data<float>(), gresidual.data<float>(),
                                 data_or_null(ggamma), data_or_null(gbeta));
  }
};

// The fused op's workspace: each pooled output's window code (kernels/op_params.h), a byte each in
// y's memory order, packed into int64 words (dpe's tensors hold float32 and int64).
inline Shape window_code_words(const Shape& pooled) { return Shape{(pooled.numel() + 7) / 8}; }
inline uint8_t* window_codes(Tensor& workspace) {
  return reinterpret_cast<uint8_t*>(workspace.data<int64_t>());
}
inline const uint8_t* window_codes(const Tensor& workspace) {
  return reinterpret_cast<const uint8_t*>(workspace.data<int64_t>());
}

// A training batch norm, a ReLU and a max pooling, y = max_pool2d(max(batch_norm(x), 0)), as one
// op: the full-size ReLU output is never made (engine/nn/fusion.h). workspace: the window codes
// of the pooling's maxima (window_code_words; a kernel up to kMaxWindowCodeKernel). Optional,
// as the batch norm + ReLU pair.
struct BatchNormReluMaxPoolForwardTrain {
  static constexpr const char* kName = "batch_norm_relu_max_pool2d";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  const Pool2dParams& p;
  Tensor& y;
  Tensor& workspace;
  Tensor& mean;
  Tensor& var;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_relu_max_pool_forward(ctx, channels_view(x), pool_view(x, p, y), x.data<float>(),
                                     data_or_null(gamma), data_or_null(beta), eps, y.data<float>(),
                                     window_codes(workspace), mean.data<float>(),
                                     var.data<float>());
  }
};

// Its gradients from gy, the pooled output's.
struct BatchNormReluMaxPoolBackward {
  static constexpr const char* kName = "batch_norm_relu_max_pool2d_backward";
  static constexpr bool kOptional = true;
  const Tensor& x;
  const Tensor& gy;
  const Tensor& workspace;
  const Tensor& gamma;
  const Tensor& beta;
  const Tensor& mean;
  const Tensor& var;
  float eps;
  const Pool2dParams& p;
  Tensor& gx;
  Tensor& ggamma;
  Tensor& gbeta;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_relu_max_pool_backward(
        ctx, channels_view(x), pool_view(x, p, gy), x.data<float>(), gy.data<float>(),
        window_codes(workspace), data_or_null(gamma), data_or_null(beta), mean.data<float>(),
        var.data<float>(), eps, gx.data<float>(), data_or_null(ggamma), data_or_null(gbeta));
  }
};

// SyncBatchNorm's building blocks (statistics reduced across ranks between the calls):
// per-channel sum and sum of squares of x.
struct ChannelSums {
  static constexpr const char* kName = "channel_sums";
  const Tensor& x;
  Tensor& sum;
  Tensor& sumsq;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    const BatchNormShape s = channels_view(x);
    channel_sums(ctx, x.data<float>(), sum.data<float>(), sumsq.data<float>(), s.n, s.c, s.s);
  }
};

// Per-channel sum(gy) and sum(gy * (x - mean)).
struct ChannelGradSums {
  static constexpr const char* kName = "channel_grad_sums";
  const Tensor& x;
  const Tensor& gy;
  const Tensor& mean;
  Tensor& sum_gy;
  Tensor& sum_gy_xmu;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    const BatchNormShape s = channels_view(x);
    channel_grad_sums(ctx, x.data<float>(), gy.data<float>(), mean.data<float>(),
                      sum_gy.data<float>(), sum_gy_xmu.data<float>(), s.n, s.c, s.s);
  }
};

// y = (x - mean) * invstd * gamma + beta (torch.batch_norm_elemt).
struct BatchNormElemt {
  static constexpr const char* kName = "batch_norm_elemt";
  const Tensor& x;
  const Tensor& mean;
  const Tensor& invstd;
  const Tensor& gamma;
  const Tensor& beta;
  Tensor& y;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_elemt(ctx, channels_view(x), x.data<float>(), mean.data<float>(),
                     invstd.data<float>(), data_or_null(gamma), data_or_null(beta),
                     y.data<float>());
  }
};

// gx = (gy - mean_gy - (x - mean) * invstd^2 * mean_gy_xmu) * invstd * gamma.
struct BatchNormBackwardElemt {
  static constexpr const char* kName = "batch_norm_backward_elemt";
  const Tensor& x;
  const Tensor& gy;
  const Tensor& mean;
  const Tensor& invstd;
  const Tensor& gamma;
  const Tensor& mean_gy;
  const Tensor& mean_gy_xmu;
  Tensor& gx;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    batch_norm_backward_elemt(ctx, channels_view(x), x.data<float>(), gy.data<float>(),
                              mean.data<float>(), invstd.data<float>(), data_or_null(gamma),
                              mean_gy.data<float>(), mean_gy_xmu.data<float>(), gx.data<float>());
  }
};

// Layer norm over the last dim: x [..., D] (D > 0) viewed as [N, D]. Writes y and, per row, mean
// and rstd = 1 / sqrt(biased var + eps), both [N], which the backward reads.
struct LayerNormForward {
  static constexpr const char* kName = "layer_norm";
  const Tensor& x;
  const Tensor& gamma;
  const Tensor& beta;
  float eps;
  Tensor& y;
  Tensor& mean;
  Tensor& rstd;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    layer_norm_forward(ctx, rows_view(x), x.data<float>(), data_or_null(gamma), data_or_null(beta),
                       eps, y.data<float>(), mean.data<float>(), rstd.data<float>());
  }
};

// gx has x's shape; ggamma/gbeta [D] may be undefined: then they are not computed.
struct LayerNormBackward {
  static constexpr const char* kName = "layer_norm_backward";
  const Tensor& x;
  const Tensor& gy;
  const Tensor& gamma;
  const Tensor& mean;
  const Tensor& rstd;
  Tensor& gx;
  Tensor& ggamma;
  Tensor& gbeta;

  const Tensor& first() const { return x; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    layer_norm_backward(ctx, rows_view(x), x.data<float>(), gy.data<float>(), data_or_null(gamma),
                        mean.data<float>(), rstd.data<float>(), gx.data<float>(),
                        data_or_null(ggamma), data_or_null(gbeta));
  }
};

}  // namespace dpe::prim
