#include "engine/backend/prims/softmax.h"

#include "engine/core/error.h"

namespace dpe::prim {

void SoftmaxForward::check(const OpCheck& c) const {
  c.tensor(x, "input");
  DPE_CHECK(x.dim() >= (causal ? 2 : 1), "softmax: expected an input of at least "
                                             << (causal ? 2 : 1) << " dimensions, but got shape "
                                             << x.shape());
  c.shaped(y, "output", x.shape(), "input", x.shape());
}
OpCost SoftmaxForward::cost() const { return op_cost::elementwise("softmax", 5, x, {&x}, {&y}); }

void SoftmaxBackward::check(const OpCheck& c) const {
  c.tensor(y, "output");
  DPE_CHECK(y.dim() >= 1,
            "softmax_backward: expected an output of at least 1 dimension, but "
            "got shape "
                << y.shape());
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
}
OpCost SoftmaxBackward::cost() const {
  return op_cost::elementwise("softmax", 4, y, {&y, &gy}, {&gx});
}

void LogSoftmaxForward::check(const OpCheck& c) const {
  c.rank(x, "input", 2);
  c.shaped(y, "output", x.shape(), "input", x.shape());
}
OpCost LogSoftmaxForward::cost() const { return op_cost::elementwise("softmax", 5, x, {&x}, {&y}); }

void LogSoftmaxBackward::check(const OpCheck& c) const {
  c.rank(y, "output", 2);
  c.shaped(gy, "grad_output", y.shape(), "output", y.shape());
  c.shaped(gx, "grad_input", y.shape(), "output", y.shape());
}
OpCost LogSoftmaxBackward::cost() const {
  return op_cost::elementwise("softmax", 4, y, {&y, &gy}, {&gx});
}

void NllLossForward::check(const OpCheck& c) const {
  c.rank(logp, "input", 2);
  c.tensor(target, "target", DType::kInt64);
  DPE_CHECK(target.dim() == 1 && target.size(0) == logp.size(0),
            "nll_loss: expected input batch_size ("
                << logp.size(0) << ") to match target batch_size ("
                << (target.dim() >= 1 ? target.size(0) : 0) << "), input of shape " << logp.shape()
                << " and target of shape " << target.shape());
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "nll_loss: expected a scalar out, but got shape " << out.shape());
}
OpCost NllLossForward::cost() const {
  return op_cost::make("loss", 1.0 * target.numel(), {&target}, {&out});
}

void NllLossBackward::check(const OpCheck& c) const {
  c.rank(gx, "grad_input", 2);
  c.tensor(gout, "grad_output");
  DPE_CHECK(gout.numel() == 1,
            "nll_loss_backward: expected a scalar grad_output, but got shape " << gout.shape());
  c.shaped(target, "target", Shape{gx.size(0)}, "grad_input", gx.shape(), DType::kInt64);
}
OpCost NllLossBackward::cost() const {
  return op_cost::make("loss", 1.0 * target.numel(), {&gout, &target}, {&gx});
}

void CrossEntropyForward::check(const OpCheck& c) const {
  c.rank(logits, "input", 2);
  c.shaped(target, "target", Shape{logits.size(0)}, "input", logits.shape(), DType::kInt64);
  c.tensor(out, "out", DType::kFloat32);
  DPE_CHECK(out.numel() == 1,
            "cross_entropy: expected a scalar out, but got shape " << out.shape());
  c.shaped(lse, "lse", Shape{logits.size(0)}, "input", logits.shape(), DType::kFloat32);
}
// Two passes' exps per element (max and the sum of exp), the logits read once.
OpCost CrossEntropyForward::cost() const {
  OpCost c = op_cost::make("softmax", 4.0 * logits.numel(), {&logits, &target}, {&out, &lse});
  c.dtype = DType::kFloat32;  // 16-bit logits are read through a conversion: it computes in float32
  return c;
}

void CrossEntropyBackward::check(const OpCheck& c) const {
  c.rank(logits, "input", 2);
  c.shaped(target, "target", Shape{logits.size(0)}, "input", logits.shape(), DType::kInt64);
  c.shaped(lse, "lse", Shape{logits.size(0)}, "input", logits.shape(), DType::kFloat32);
  c.tensor(gout, "grad_output", DType::kFloat32);
  DPE_CHECK(gout.numel() == 1,
            "cross_entropy_backward: expected a scalar grad_output, but got "
            "shape "
                << gout.shape());
  c.shaped(gx, "grad_input", logits.shape(), "input", logits.shape());
}
OpCost CrossEntropyBackward::cost() const {
  OpCost c =
      op_cost::make("softmax", 4.0 * logits.numel(), {&logits, &target, &lse, &gout}, {&gx});
  c.dtype = DType::kFloat32;  // as the forward's
  return c;
}

}  // namespace dpe::prim
