// Optimizer-update prims, in place (torch.optim's formulas, kernels/op_params.h). See prims.h for
// what a prim declares.
#pragma once

#include <cstdint>

#include "engine/backend/op_check.h"
#include "engine/backend/op_cost.h"
#include "engine/tensor/tensor.h"
#include "kernels/op_params.h"

namespace dpe::prim {

// buf is the momentum buffer (undefined when momentum == 0); `first` marks its first use. The
// updated tensors' versions are bumped, kernel or not.
struct SgdStep {
  static constexpr const char* kName = "sgd";
  Tensor& param;
  const Tensor& grad;
  Tensor& buf;
  const SgdStepParams& o;
  bool first_use;

  const Tensor& first() const { return param; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    sgd_step(ctx, param.data<float>(), grad.data<float>(),
             o.momentum != 0.0f ? buf.data<float>() : nullptr, o, first_use, param.numel());
  }
  void after() const;
};

// `step` counts from 1.
struct AdamStep {
  static constexpr const char* kName = "adam";
  Tensor& param;
  const Tensor& grad;
  Tensor& exp_avg;
  Tensor& exp_avg_sq;
  const AdamStepParams& o;
  int64_t step;

  const Tensor& first() const { return param; }
  void check(const OpCheck& c) const;
  OpCost cost() const;
  template <class Ctx>
  void launch(Ctx& ctx) const {
    adam_step(ctx, param.data<float>(), grad.data<float>(), exp_avg.data<float>(),
              exp_avg_sq.data<float>(), o, step, param.numel());
  }
  void after() const;
};

}  // namespace dpe::prim
