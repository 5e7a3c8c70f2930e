#include "engine/backend/prims/reduce.h"

#include "engine/core/error.h"

namespace dpe::prim {

void SumAll::check(const OpCheck& c) const {
  c.tensor(x, "input");
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "sum: expected a scalar out, but got shape " << out.shape());
}
OpCost SumAll::cost() const { return op_cost::elementwise("reduction", 1, x, {&x}, {&out}); }

void SumSquares::check(const OpCheck& c) const {
  c.tensor(x, "input");
  c.tensor(out, "out");
  DPE_CHECK(out.numel() == 1, "sum_squares: expected a scalar out, but got shape " << out.shape());
}
OpCost SumSquares::cost() const { return op_cost::elementwise("reduction", 2, x, {&x}, {&out}); }

void ArgmaxRows::check(const OpCheck& c) const {
  c.rank(x, "input", 2);
  DPE_CHECK(x.size(1) > 0,
            "argmax: expected a non-empty dim 1, but got input of shape " << x.shape());
  c.shaped(out, "out", Shape{x.size(0)}, "input", x.shape(), DType::kInt64);
}
OpCost ArgmaxRows::cost() const { return op_cost::elementwise("reduction", 1, x, {&x}, {&out}); }

void AllFinite::check(const OpCheck& c) const { c.tensor(x, "input"); }
OpCost AllFinite::cost() const { return op_cost::elementwise("reduction", 1, x, {&x}, {}); }

}  // namespace dpe::prim
