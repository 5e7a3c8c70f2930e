// SGD with momentum, dampening, weight decay and Nesterov, with torch.optim.SGD's update:
//   g = grad + wd * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
//   g = nesterov ? g + momentum * b : b;  p -= lr * g.
//
// Threading contract: as Optimizer (optimizer.h).
#pragma once

#include "engine/optim/optimizer.h"

namespace dpe::optim {

// torch.optim.SGD's hyper-parameters.
struct SgdOptions {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SgdOptions& options);
  void step() override;
  StateDict state_dict() const override;
  void load_state_dict(const StateDict& state) override;

 private:
  SgdOptions options_;
  std::vector<Tensor> momentum_buffers_;  // undefined until first used
};

}  // namespace dpe::optim
