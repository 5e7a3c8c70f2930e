// Losses (mean reduction, as PyTorch's defaults).
#include "engine/autograd/autocast_ops.h"
#include "engine/autograd/node.h"
#include "engine/autograd/op_helpers.h"
#include "engine/autograd/ops.h"

namespace dpe::ops {

using detail::has_fused_kernels;
using detail::like;
using detail::prepare;

Tensor log_softmax(const Tensor& x_in) {
  if (autocast_detail::applies(x_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return log_softmax(autocast_detail::float32(x_in));
  }
  Tensor x = prepare("log_softmax", x_in, x_in, "input");
  DPE_CHECK(x.dim() == 2, "log_softmax: expected a 2-D input [N, C], got " << x.shape());
  DeviceGuard guard(&x.context());
  Tensor y = like(x);
  dispatch(prim::LogSoftmaxForward{x, y});
  Tensor saved = y.detach();
  record("log_softmax", {x_in}, {&y},
         [saved](const std::vector<Tensor>& g) {
           Tensor gx = like(saved);
           dispatch(prim::LogSoftmaxBackward{saved, g[0].contiguous(), gx});
           return std::vector<Tensor>{gx};
         },
         {saved});
  return y;
}

namespace {

// The checks of input [N, C] and target [N] that nll_loss and cross_entropy share; the target,
// contiguous.
Tensor checked_target(const char* op, const Tensor& input, const Tensor& target) {
  DPE_CHECK(target.defined(), op << ": target is undefined");
  check_dtype(op, target, DType::kInt64, "target");
  check_same_device(op, input, target);
  DPE_CHECK(input.dim() == 2 && target.dim() == 1 && target.size(0) == input.size(0),
            op << ": expected input [N, C] and target [N], got input " << input.shape()
               << " and target " << target.shape());
  DPE_CHECK(input.size(0) > 0, op << ": the batch is empty");
  return target.contiguous();
}

}  // namespace

Tensor nll_loss(const Tensor& logp_in, const Tensor& target_in, int64_t ignore_index) {
  if (autocast_detail::applies(logp_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return nll_loss(autocast_detail::float32(logp_in), target_in, ignore_index);
  }
  Tensor logp = prepare("nll_loss", logp_in, logp_in, "input");
  Tensor target = checked_target("nll_loss", logp, target_in);
  DeviceGuard guard(&logp.context());
  Tensor out = Tensor::empty(Shape{}, DType::kFloat32, logp.device());
  dispatch(prim::NllLossForward{logp, target, ignore_index, out});
  const Shape shape = logp.shape();
  record("nll_loss", {logp_in}, {&out},
         [target, shape, ignore_index](const std::vector<Tensor>& g) {
           Tensor gx = Tensor::empty(shape, DType::kFloat32, g[0].device());
           dispatch(prim::NllLossBackward{g[0], target, ignore_index, gx});
           return std::vector<Tensor>{gx};
         },
         {target});
  return out;
}

namespace {

// log_softmax then nll_loss as one op, where the device has its kernels: neither the [N, C]
// log-probabilities nor nll_loss's [N, C] gradient is made, the backward writes the logits'
// gradient from them and each row's log-sum-exp. The same loss and gradients up to rounding
// (CrossEntropyTest in tests/engine/autograd/autograd_test.cc and
// tests/kernels/host/log_softmax_test.cc).
Tensor fused_cross_entropy(const Tensor& logits_in, const Tensor& target_in, int64_t ignore_index) {
  Tensor logits = prepare("cross_entropy", logits_in, logits_in, "input");
  Tensor target = checked_target("cross_entropy", logits, target_in);
  DeviceGuard guard(&logits.context());
  Tensor out = Tensor::empty(Shape{}, DType::kFloat32, logits.device());
  Tensor lse = Tensor::empty(Shape{logits.size(0)}, DType::kFloat32, logits.device());
  dispatch(prim::CrossEntropyForward{logits, target, ignore_index, out, lse});
  Tensor saved = logits.detach();
  record("cross_entropy", {logits_in}, {&out},
         [saved, target, lse, ignore_index](const std::vector<Tensor>& g) {
           Tensor gx = like(saved);
           dispatch(
               prim::CrossEntropyBackward{saved, target, lse, g[0].contiguous(), ignore_index, gx});
           return std::vector<Tensor>{gx};
         },
         {saved, target});
  return out;
}

}  // namespace

Tensor CrossEntropy::operator()(const Tensor& logits_in, const Tensor& target,
                                int64_t ignore_index) const {
  if (autocast_detail::applies(logits_in)) {  // autocast's float32 list
    const autocast_detail::Running running;
    // 16-bit logits go to the fused kernels as they are where the device has them: they read
    // each row through a conversion, the same values as a float32 copy without holding one (a
    // language model's [B, T, V] logits twice).
    const DType dt = logits_in.dtype();
    const bool reads_16_bit =
        dt != DType::kFloat32 && supports<prim::CrossEntropyForward>(logits_in.device(), dt) &&
        supports<prim::CrossEntropyBackward>(logits_in.device(), dt);
    return (*this)(reads_16_bit ? logits_in : autocast_detail::float32(logits_in), target,
                   ignore_index);
  }
  Tensor logits = logits_in;
  Tensor flat_target = target;
  if (logits.defined() && target.defined() && logits.dim() == 3) {
    // A language model's [B, T, V] against [B, T]: one row per position.
    DPE_CHECK(
        target.dim() == 2 && target.size(0) == logits.size(0) && target.size(1) == logits.size(1),
        "cross_entropy: expected target [B, T] for logits [B, T, V] "
            << logits.shape() << ", got target " << target.shape());
    const int64_t rows = logits.size(0) * logits.size(1);
    logits = reshape(logits, Shape{rows, logits.size(2)});
    flat_target = target.reshape(Shape{rows});
  }
  if (has_fused_kernels<prim::CrossEntropyForward, prim::CrossEntropyBackward>(logits)) {
    return fused_cross_entropy(logits, flat_target, ignore_index);
  }
  return nll_loss(log_softmax(logits), flat_target, ignore_index);
}

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  if (autocast_detail::applies(input)) {  // autocast's float32 list
    const autocast_detail::Running running;
    return mse_loss(autocast_detail::float32(input), autocast_detail::float32(target));
  }
  DPE_CHECK(input.defined() && target.defined(), "mse_loss: undefined input or target");
  DPE_CHECK(input.shape() == target.shape(), "mse_loss: input " << input.shape() << " and target "
                                                                << target.shape()
                                                                << " must have the same size");
  Tensor diff = sub(input, target);
  return mean(mul(diff, diff));
}

}  // namespace dpe::ops
