// Adam and AdamW with torch.optim's updates (bias-corrected moments, eps added after the square
// root; AdamW decays the weights directly: p *= 1 - lr * wd).
//
// Threading contract: as Optimizer (optimizer.h).
#pragma once

#include <cstdint>

#include "engine/optim/optimizer.h"

namespace dpe::optim {

// torch.optim.Adam's hyper-parameters, and adamw for AdamW's decoupled weight decay. The betas
// are double, as PyTorch's Python floats: the kernels take 1 - beta rounded once from them (from
// 0.999f, 1 - beta2 would be 1.3e-5 off PyTorch's).
struct AdamOptions {
  float lr = 1e-3f;
  double beta1 = 0.9;
  double beta2 = 0.999;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool adamw = false;  // decoupled weight decay (AdamW): p *= 1 - lr * weight_decay
};

// The most steps a parameter's state may count: 2^53, where a double (the bias corrections'
// arithmetic) still counts every step; a loaded step past it is refused, and step() never wraps.
inline constexpr int64_t kMaxAdamStep = int64_t{1} << 53;

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
  double beta1 = 0.9;  // double, as AdamOptions'
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
