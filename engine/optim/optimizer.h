// Optimizer: the parameters it updates in place and their per-parameter state; SGD and Adam/AdamW
// derive from it. Updates run on each parameter's device through its backend.
//
// Threading contract: step() and zero_grad() are called by one thread, after backward() returned.
#pragma once

#include <string>
#include <vector>

#include "engine/nn/module.h"
#include "engine/tensor/tensor.h"

namespace dpe::optim {

class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, float lr);
  virtual ~Optimizer() = default;

  virtual void step() = 0;
  void zero_grad();  // .grad = undefined for every parameter (set_to_none)

  float lr() const { return lr_; }
  void set_lr(float lr) { lr_ = lr; }

  // Per-parameter state ("state.3.momentum_buffer", "state.3.step"), for checkpoints.
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;

 protected:
  std::vector<Tensor> params_;
  float lr_;
};

}  // namespace dpe::optim
