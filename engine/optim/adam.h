// Adam and AdamW with torch.optim's updates (bias-corrected moments, eps added after the square
// root; AdamW decays the weights directly: p *= 1 - lr * wd).
#pragma once

#include "engine/optim/optimizer.h"

namespace dpe::optim {

struct AdamOptions {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options, bool decoupled = false);
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_;
  std::vector<int64_t> steps_;
};

// AdamW: Adam with decoupled weight decay (PyTorch uses weight_decay=0.01 by default for it).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, true) {}
};

}  // namespace dpe::optim
