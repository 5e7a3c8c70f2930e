#include "engine/backend/prims/norm.h"

#include "engine/core/error.h"

namespace dpe::prim {

namespace {

// x [N, C, ...] for the batch-norm family, viewed as [N, C, S] ([N, S, C] when channels last,
// where `channels_last` allows it: SyncBatchNorm's sums take contiguous input only).
BatchNormShape checked_channels(const OpCheck& c, const Tensor& x, bool channels_last = true) {
  c.tensor(x, "input", DType::kFloat32,
           channels_last ? activation_format(x) : MemoryFormat::kContiguous);
  DPE_CHECK(x.dim() >= 2, c.op() << ": expected an input of at least 2 dimensions [N, C, ...], "
                                    "but got shape "
                                 << x.shape());
  return channels_view(x);
}

// The training forward's arguments (plain, fused with a ReLU, and with a pooling after it: y_shape
// is the output's); returns x's [N, C, S].
BatchNormShape check_train(const OpCheck& c, const Tensor& x, const Tensor& gamma,
                           const Tensor& beta, const Tensor& y, const Shape& y_shape,
                           const Tensor& mean, const Tensor& var) {
  const BatchNormShape s = checked_channels(c, x);
  DPE_CHECK(s.n * s.s > 1, c.op() << ": expected more than 1 value per channel when training, "
                                     "got input size "
                                  << x.shape());
  c.channel(gamma, "weight", s.c, x);
  c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", y_shape, "input", x.shape(), DType::kFloat32, activation_format(x));
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  return s;
}

// The training backward's arguments (plain, fused with a ReLU, and with a pooling after it:
// gy_shape is the output's); returns x's [N, C, S].
BatchNormShape check_backward(const OpCheck& c, const Tensor& x, const Tensor& gy,
                              const Shape& gy_shape, const Tensor& gamma, const Tensor& mean,
                              const Tensor& var, const Tensor& gx, const Tensor& ggamma,
                              const Tensor& gbeta) {
  const BatchNormShape s = checked_channels(c, x);
  const MemoryFormat f = activation_format(x);
  c.shaped(gy, "grad_output", gy_shape, "input", x.shape(), DType::kFloat32, f);
  c.channel(gamma, "weight", s.c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "var", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape(), DType::kFloat32, f);
  c.channel(ggamma, "grad_weight", s.c, x);
  c.channel(gbeta, "grad_bias", s.c, x);
  return s;
}

// x [..., D] for layer norm, viewed as [N, D].
LayerNormShape checked_rows(const OpCheck& c, const Tensor& x) {
  c.tensor(x, "input");
  DPE_CHECK(x.dim() >= 1 && x.size(-1) > 0,
            c.op() << ": expected an input [..., D] with D > 0, but got shape " << x.shape());
  return rows_view(x);
}

}  // namespace

void BatchNormForwardTrain::check(const OpCheck& c) const {
  check_train(c, x, gamma, beta, y, x.shape(), mean, var);
}
OpCost BatchNormForwardTrain::cost() const {
  return op_cost::make("norm", 8.0 * x.numel(), {&x, &x, &gamma, &beta}, {&y, &mean, &var});
}

void BatchNormForwardEval::check(const OpCheck& c) const {
  const BatchNormShape s = checked_channels(c, x);
  c.channel(gamma, "weight", s.c, x);
  c.channel(beta, "bias", s.c, x);
  c.shaped(mean, "running_mean", Shape{s.c}, "input", x.shape());
  c.shaped(var, "running_var", Shape{s.c}, "input", x.shape());
  c.shaped(y, "output", x.shape(), "input", x.shape(), DType::kFloat32, activation_format(x));
}
OpCost BatchNormForwardEval::cost() const {
  return op_cost::make("norm", 4.0 * x.numel(), {&x, &gamma, &beta, &mean, &var}, {&y});
}

void BatchNormBackward::check(const OpCheck& c) const {
  check_backward(c, x, gy, x.shape(), gamma, mean, var, gx, ggamma, gbeta);
}
OpCost BatchNormBackward::cost() const {
  return op_cost::make("norm", 12.0 * x.numel(), {&x, &gy, &x, &gy, &gamma, &mean, &var},
                       {&gx, &ggamma, &gbeta});
}

void BatchNormReluForwardTrain::check(const OpCheck& c) const {
  check_train(c, x, gamma, beta, y, x.shape(), mean, var);
}
OpCost BatchNormReluForwardTrain::cost() const {
  return op_cost::make("norm", 9.0 * x.numel(), {&x, &x, &gamma, &beta}, {&y, &mean, &var});
}

void BatchNormReluBackward::check(const OpCheck& c) const {
  const BatchNormShape s = check_backward(c, x, gy, x.shape(), gamma, mean, var, gx, ggamma, gbeta);
  c.channel(beta, "bias", s.c, x);
}
OpCost BatchNormReluBackward::cost() const {
  return op_cost::make("norm", 16.0 * x.numel(), {&x, &gy, &x, &gy, &gamma, &beta, &mean, &var},
                       {&gx, &ggamma, &gbeta});
}

void BatchNormAddReluForwardTrain::check(const OpCheck& c) const {
  check_train(c, x, gamma, beta, y, x.shape(), mean, var);
  c.shaped(residual, "residual", x.shape(), "input", x.shape(), DType::kFloat32,
           activation_format(x));
}
OpCost BatchNormAddReluForwardTrain::cost() const {
  return op_cost::make("norm", 10.0 * x.numel(), {&x, &x, &residual, &gamma, &beta},
                       {&y, &mean, &var});
}

void BatchNormAddReluBackward::check(const OpCheck& c) const {
  check_backward(c, x, gy, x.shape(), gamma, mean, var, gx, ggamma, gbeta);
  const MemoryFormat f = activation_format(x);
  c.shaped(y, "output", x.shape(), "input", x.shape(), DType::kFloat32, f);
  c.shaped(gresidual, "grad_residual", x.shape(), "input", x.shape(), DType::kFloat32, f);
}
OpCost BatchNormAddReluBackward::cost() const {
  // Channels last: x, y and gy read for the sums (gresidual written there), then x and gresidual
  // for gx. NCHW reads y and gy in a pass of their own, then gresidual and x twice: the cost
  // model's figure is the fused layout's.
  return op_cost::make("norm", 13.0 * x.numel(), {&x, &y, &gy, &x, &gresidual, &gamma, &mean, &var},
                       {&gresidual, &gx, &ggamma, &gbeta});
}

namespace {
// The pooled output's shape of the fused batch norm + ReLU + max pooling over x (4-D), whose
// windows must have codes.
Shape pooled_shape(const OpCheck& c, const Tensor& x, const Pool2dParams& p) {
  c.rank(x, "input", 4, activation_format(x));
  const Pool2dShape s =
      max_pool2d_shape(x.size(0), x.size(1), x.size(2), x.size(3), p.kernel, p.stride, p.padding);
  DPE_CHECK(s.kernel <= kMaxWindowCodeKernel,
            c.op() << ": kernel " << s.kernel << " has no window codes (a kernel up to "
                   << kMaxWindowCodeKernel << "); run the ops apart");
  return Shape{s.n, s.c, s.ho, s.wo};
}

void check_codes(const OpCheck& c, const Tensor& workspace, const Shape& out) {
  c.shaped(workspace, "window codes", window_code_words(out), "output", out, DType::kInt64);
}
}  // namespace

void BatchNormReluMaxPoolForwardTrain::check(const OpCheck& c) const {
  const Shape out = pooled_shape(c, x, p);
  check_train(c, x, gamma, beta, y, out, mean, var);
  check_codes(c, workspace, out);
}
OpCost BatchNormReluMaxPoolForwardTrain::cost() const {
  // x twice (statistics, then the normalised blocks, pooled from the caches).
  return op_cost::make("norm", 9.0 * x.numel() + 1.0 * y.numel() * p.kernel * p.kernel,
                       {&x, &x, &gamma, &beta}, {&y, &workspace, &mean, &var});
}

void BatchNormReluMaxPoolBackward::check(const OpCheck& c) const {
  const Shape out = pooled_shape(c, x, p);
  const BatchNormShape s = check_backward(c, x, gy, out, gamma, mean, var, gx, ggamma, gbeta);
  check_codes(c, workspace, out);
  c.channel(beta, "bias", s.c, x);
}
OpCost BatchNormReluMaxPoolBackward::cost() const {
  // What a two-pass kernel must move (op_cost.h): x, gy and the codes for the sums, again for gx.
  // The host kernel's extra pass over gx (written, read back, written) is its own choice and
  // stays out of the bound.
  return op_cost::make("norm", 16.0 * x.numel() + 2.0 * gy.numel(),
                       {&x, &gy, &workspace, &x, &gy, &workspace, &gamma, &beta, &mean, &var},
                       {&gx, &ggamma, &gbeta});
}

void ChannelSums::check(const OpCheck& c) const {
  const BatchNormShape s = checked_channels(c, x, /*channels_last=*/false);
  c.shaped(sum, "sum", Shape{s.c}, "input", x.shape());
  c.shaped(sumsq, "sumsq", Shape{s.c}, "input", x.shape());
}
OpCost ChannelSums::cost() const {
  return op_cost::make("norm", 3.0 * x.numel(), {&x}, {&sum, &sumsq});
}

void ChannelGradSums::check(const OpCheck& c) const {
  const BatchNormShape s = checked_channels(c, x, /*channels_last=*/false);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy, "sum_dy", Shape{s.c}, "input", x.shape());
  c.shaped(sum_gy_xmu, "sum_dy_xmu", Shape{s.c}, "input", x.shape());
}
OpCost ChannelGradSums::cost() const {
  return op_cost::make("norm", 4.0 * x.numel(), {&x, &gy, &mean}, {&sum_gy, &sum_gy_xmu});
}

void BatchNormElemt::check(const OpCheck& c) const {
  const BatchNormShape s = checked_channels(c, x);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  c.channel(gamma, "weight", s.c, x);
  c.channel(beta, "bias", s.c, x);
  c.shaped(y, "output", x.shape(), "input", x.shape(), DType::kFloat32, activation_format(x));
}
OpCost BatchNormElemt::cost() const {
  return op_cost::make("norm", 4.0 * x.numel(), {&x, &mean, &invstd, &gamma, &beta}, {&y});
}

void BatchNormBackwardElemt::check(const OpCheck& c) const {
  const BatchNormShape s = checked_channels(c, x);
  const MemoryFormat f = activation_format(x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape(), DType::kFloat32, f);
  c.shaped(mean, "mean", Shape{s.c}, "input", x.shape());
  c.shaped(invstd, "invstd", Shape{s.c}, "input", x.shape());
  c.channel(gamma, "weight", s.c, x);
  c.shaped(mean_gy, "mean_dy", Shape{s.c}, "input", x.shape());
  c.shaped(mean_gy_xmu, "mean_dy_xmu", Shape{s.c}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape(), DType::kFloat32, f);
}
OpCost BatchNormBackwardElemt::cost() const {
  return op_cost::make("norm", 8.0 * x.numel(),
                       {&x, &gy, &mean, &invstd, &gamma, &mean_gy, &mean_gy_xmu}, {&gx});
}

void LayerNormForward::check(const OpCheck& c) const {
  const LayerNormShape s = checked_rows(c, x);
  c.optional(gamma, "weight", Shape{s.cols}, "input", x.shape());
  c.optional(beta, "bias", Shape{s.cols}, "input", x.shape());
  c.shaped(y, "output", x.shape(), "input", x.shape());
  c.shaped(mean, "mean", Shape{s.rows}, "input", x.shape());
  c.shaped(rstd, "rstd", Shape{s.rows}, "input", x.shape());
}
OpCost LayerNormForward::cost() const {
  return op_cost::make("norm", 8.0 * x.numel(), {&x, &gamma, &beta}, {&y, &mean, &rstd});
}

void LayerNormBackward::check(const OpCheck& c) const {
  const LayerNormShape s = checked_rows(c, x);
  c.shaped(gy, "grad_output", x.shape(), "input", x.shape());
  c.optional(gamma, "weight", Shape{s.cols}, "input", x.shape());
  c.shaped(mean, "mean", Shape{s.rows}, "input", x.shape());
  c.shaped(rstd, "rstd", Shape{s.rows}, "input", x.shape());
  c.shaped(gx, "grad_input", x.shape(), "input", x.shape());
  c.optional(ggamma, "grad_weight", Shape{s.cols}, "input", x.shape());
  c.optional(gbeta, "grad_bias", Shape{s.cols}, "input", x.shape());
}
OpCost LayerNormBackward::cost() const {
  return op_cost::make("norm", 12.0 * x.numel(), {&x, &gy, &gamma, &mean, &rstd},
                       {&gx, &ggamma, &gbeta});
}

}  // namespace dpe::prim
