#include "engine/backend/prims/elementwise.h"

namespace dpe::prim {

namespace {
// Inputs and output of the shape of `x`.
void same_shapes(const OpCheck& c, const Tensor& x, const char* x_name,
                 std::initializer_list<std::pair<const Tensor*, const char*>> others) {
  c.tensor(x, x_name);
  for (const auto& [t, what] : others) c.shaped(*t, what, x.shape(), x_name, x.shape());
}
}  // namespace

void Add::check(const OpCheck& c) const { same_shapes(c, a, "a", {{&b, "b"}, {&out, "out"}}); }
OpCost Add::cost() const { return op_cost::elementwise("elementwise", 2, a, {&a, &b}, {&out}); }

void Mul::check(const OpCheck& c) const { same_shapes(c, a, "a", {{&b, "b"}, {&out, "out"}}); }
OpCost Mul::cost() const { return op_cost::elementwise("elementwise", 1, a, {&a, &b}, {&out}); }

void Scale::check(const OpCheck& c) const { same_shapes(c, a, "a", {{&out, "out"}}); }
OpCost Scale::cost() const { return op_cost::elementwise("elementwise", 1, a, {&a}, {&out}); }

void ReluForward::check(const OpCheck& c) const { same_shapes(c, x, "input", {{&y, "output"}}); }
OpCost ReluForward::cost() const { return op_cost::elementwise("elementwise", 1, x, {&x}, {&y}); }

void ReluBackward::check(const OpCheck& c) const {
  same_shapes(c, y, "output", {{&gy, "grad_output"}, {&gx, "grad_input"}});
}
OpCost ReluBackward::cost() const {
  return op_cost::elementwise("elementwise", 1, y, {&y, &gy}, {&gx});
}

void GeluForward::check(const OpCheck& c) const { same_shapes(c, x, "input", {{&y, "output"}}); }
OpCost GeluForward::cost() const { return op_cost::elementwise("elementwise", 10, x, {&x}, {&y}); }

void GeluBackward::check(const OpCheck& c) const {
  same_shapes(c, x, "input", {{&gy, "grad_output"}, {&gx, "grad_input"}});
}
OpCost GeluBackward::cost() const {
  return op_cost::elementwise("elementwise", 16, x, {&x, &gy}, {&gx});
}

void DropoutMask::check(const OpCheck& c) const { c.tensor(mask, "mask"); }
OpCost DropoutMask::cost() const {
  return op_cost::elementwise("elementwise", 4, mask, {}, {&mask});
}

}  // namespace dpe::prim
