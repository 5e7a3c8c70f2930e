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

// torch.optim.AdamW's hyper-parameters and defaults: unlike Adam's, weight_decay defaults to 0.01.
// A type of its own, so an AdamW built from default options decays as PyTorch's does.
struct AdamWOptions {
  float lr = 1e-3f;
  double beta1 = 0.9;  // double, as AdamOptions' (kernels/op_params.h)
  double beta2 = 0.999;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

// AdamW: Adam with decoupled weight decay (p *= 1 - lr * weight_decay before the Adam update).
class AdamW : public Adam {
 public:
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {})
      : Adam(std::move(params), as_adam(options)) {}

 private:
  static AdamOptions as_adam(const AdamWOptions& o) {
    return {o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, /*adamw=*/true};
  }
};

}  // namespace dpe::optim
