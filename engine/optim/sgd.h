// SGD with momentum, dampening, weight decay and Nesterov, with torch.optim.SGD's update:
//   g = grad + wd * p;  b = g (first step) or momentum * b + (1 - dampening) * g;
//   g = nesterov ? g + momentum * b : b;  p -= lr * g.
//
// Threading contract: as Optimizer (optimizer.h).
#pragma once

#include "engine/backend/backend.h"
#include "engine/optim/optimizer.h"

namespace dpe::optim {

// lr, momentum, dampening, weight_decay, nesterov: the hyper-parameters every backend's sgd_step
// takes (defined once, in kernels/op_params.h).
using SgdOptions = dpe::SgdOptions;

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
