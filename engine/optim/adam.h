// Adam and AdamW with torch.optim's updates (bias-corrected moments, eps added after the square
// root; AdamW decays the weights directly: p *= 1 - lr * wd).
//
// Threading contract: as Optimizer (optimizer.h).
#pragma once

#include "engine/backend/backend.h"
#include "engine/optim/optimizer.h"

namespace dpe::optim {

// lr, beta1, beta2, eps, weight_decay and adamw (decoupled weight decay): the hyper-parameters
// every backend's adam_step takes (defined once, in kernels/op_params.h).
using AdamOptions = dpe::AdamOptions;

class Adam : public Optimizer {
 public:
  // AdamW's update when options.adamw is set.
  Adam(std::vector<Tensor> params, const AdamOptions& options);
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  AdamOptions options_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

// AdamW: Adam with decoupled weight decay (PyTorch uses weight_decay=0.01 by default for it).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options)
      : Adam(std::move(params), with_decoupled_decay(options)) {}

 private:
  static AdamOptions with_decoupled_decay(AdamOptions o) {
    o.adamw = true;
    return o;
  }
};

}  // namespace dpe::optim
