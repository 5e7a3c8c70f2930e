#include "engine/backend/prims/optim.h"

#include "engine/core/error.h"

namespace dpe::prim {

void SgdStep::check(const OpCheck& c) const {
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  DPE_CHECK(!o.nesterov || (o.momentum > 0.0f && o.dampening == 0.0f),
            "sgd: Nesterov momentum requires a momentum and zero dampening");
  if (o.momentum != 0.0f) c.shaped(buf, "momentum_buffer", param.shape(), "param", param.shape());
}
OpCost SgdStep::cost() const {
  return op_cost::elementwise("optimizer", 5, param, {&param, &grad, &buf}, {&param, &buf});
}
void SgdStep::after() const {
  param.bump_version();
  if (o.momentum != 0.0f) buf.bump_version();
}

void AdamStep::check(const OpCheck& c) const {
  c.tensor(param, "param");
  c.shaped(grad, "grad", param.shape(), "param", param.shape());
  c.shaped(exp_avg, "exp_avg", param.shape(), "param", param.shape());
  c.shaped(exp_avg_sq, "exp_avg_sq", param.shape(), "param", param.shape());
}
OpCost AdamStep::cost() const {
  return op_cost::elementwise("optimizer", 15, param, {&param, &grad, &exp_avg, &exp_avg_sq},
                              {&param, &exp_avg, &exp_avg_sq});
}
void AdamStep::after() const {
  param.bump_version();
  exp_avg.bump_version();
  exp_avg_sq.bump_version();
}

}  // namespace dpe::prim
