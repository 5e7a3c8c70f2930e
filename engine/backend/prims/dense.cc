#include "engine/backend/prims/dense.h"

#include "engine/core/error.h"

namespace dpe::prim {

void LinearForward::check(const OpCheck& c) const {
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  const LinearShape s = linear_shape(x, w, w_transposed);
  DPE_CHECK(s.in == w.size(w_transposed ? 0 : 1),
            "linear: input of shape "
                << x.shape() << " and weight of shape " << w.shape()
                << (w_transposed ? " (stored [in, out])" : "") << " cannot be multiplied ("
                << x.size(1) << " input features, weight expects " << w.size(w_transposed ? 0 : 1)
                << ")");
  c.optional(b, "bias", Shape{s.out}, "weight", w.shape());
  c.shaped(y, "output", Shape{s.batch, s.out}, "input", x.shape());
}
OpCost LinearForward::cost() const {
  const LinearShape s = linear_shape(x, w, w_transposed);
  return op_cost::make("gemm", 2.0 * s.batch * s.in * s.out, {&x, &w, &b}, {&y});
}

void LinearBackward::check(const OpCheck& c) const {
  c.rank(x, "input", 2);
  c.rank(w, "weight", 2);
  const LinearShape s = linear_shape(x, w, w_transposed);
  DPE_CHECK(s.in == w.size(w_transposed ? 0 : 1), "linear_backward: input of shape "
                                                      << x.shape() << " and weight of shape "
                                                      << w.shape() << " cannot be multiplied");
  c.shaped(gy, "grad_output", Shape{s.batch, s.out}, "input", x.shape());
  c.optional(gx, "grad_input", x.shape(), "input", x.shape());
  c.optional(gw, "grad_weight", w.shape(), "weight", w.shape());
  c.optional(gb, "grad_bias", Shape{s.out}, "weight", w.shape());
}
OpCost LinearBackward::cost() const {
  const LinearShape s = linear_shape(x, w, w_transposed);
  const double gemms = (gx.defined() ? 1 : 0) + (gw.defined() ? 1 : 0);
  return op_cost::make(
      "gemm", 2.0 * s.batch * s.in * s.out * gemms + (gb.defined() ? 1.0 * gy.numel() : 0.0),
      {&x, &w, &gy}, {&gx, &gw, &gb});
}

void Matmul::check(const OpCheck& c) const {
  c.rank(a, "a", 2);
  c.rank(b, "b", 2);
  DPE_CHECK(a.size(1) == b.size(0), "matmul: a of shape " << a.shape() << " and b of shape "
                                                          << b.shape() << " cannot be multiplied");
  c.shaped(out, "out", Shape{a.size(0), b.size(1)}, "a", a.shape());
}
OpCost Matmul::cost() const {
  return op_cost::make("gemm", 2.0 * a.size(0) * a.size(1) * b.size(1), {&a, &b}, {&out});
}

void Bmm::check(const OpCheck& c) const {
  c.rank(a, "batch1", 3);
  c.rank(b, "batch2", 3);
  const int64_t m = a.size(trans_a ? 2 : 1), ka = a.size(trans_a ? 1 : 2);
  const int64_t kb = b.size(trans_b ? 2 : 1), n = b.size(trans_b ? 1 : 2);
  DPE_CHECK(a.size(0) == b.size(0) && ka == kb,
            "bmm: batch1 of shape " << a.shape() << (trans_a ? " (transposed)" : "")
                                    << " and batch2 of shape " << b.shape()
                                    << (trans_b ? " (transposed)" : "") << " cannot be multiplied");
  c.shaped(out, "out", Shape{a.size(0), m, n}, "batch1", a.shape());
}
OpCost Bmm::cost() const {
  return op_cost::make("gemm", 2.0 * out.numel() * a.size(trans_a ? 1 : 2), {&a, &b}, {&out});
}

void EmbeddingForward::check(const OpCheck& c) const {
  c.rank(weight, "weight", 2);
  c.tensor(index, "indices", DType::kInt64);
  DPE_CHECK(index.dim() == 1,
            "embedding: expected 1-D indices [N], but got shape " << index.shape());
  c.shaped(y, "output", Shape{index.size(0), weight.size(1)}, "weight", weight.shape());
}
OpCost EmbeddingForward::cost() const { return op_cost::make("embedding", 0, {&index, &y}, {&y}); }

void EmbeddingBackward::check(const OpCheck& c) const {
  c.rank(gw, "grad_weight", 2);
  c.tensor(index, "indices", DType::kInt64);
  DPE_CHECK(index.dim() == 1,
            c.op() << ": expected 1-D indices [N], but got shape " << index.shape());
  c.shaped(gy, "grad_output", Shape{index.size(0), gw.size(1)}, "grad_weight", gw.shape());
}
OpCost EmbeddingBackward::cost() const {
  return op_cost::make("embedding", 1.0 * gy.numel(), {&index, &gy}, {&gw});
}

void EmbeddingBackwardAccumulate::check(const OpCheck& c) const {
  EmbeddingBackward{index, gy, gw}.check(c);
}
OpCost EmbeddingBackwardAccumulate::cost() const {
  // At most as many rows of gw read and written as gy has: the rows its indices name.
  OpCost cost = op_cost::make("embedding", 2.0 * gy.numel(), {&index, &gy}, {&gy});
  cost.bytes_read += cost.bytes_written;
  return cost;
}

}  // namespace dpe::prim
