// Optimizer: the parameters it updates in place and their per-parameter state; SGD and Adam/AdamW
// derive from it. Updates run on each parameter's device through its backend.
//
// Threading contract: step() and zero_grad() are called by one thread, after backward() returned.
#pragma once

#include <string>
#include <utility>
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
  // load_state_dict checks every entry before it takes any (a dpe::Error naming the key
  // otherwise, the optimizer unchanged); parameters without entries keep their state.
  virtual StateDict state_dict() const = 0;
  virtual void load_state_dict(const StateDict& state) = 0;

 protected:
  // The parameter index and the field of a state key "state.<i>.<field>" of optimizer `who`.
  // Throws dpe::Error naming `name` unless it has that form, <i> is a decimal number of at most
  // 9 digits, and a parameter's index.
  std::pair<size_t, std::string> state_key(const char* who, const std::string& name) const;

  std::vector<Tensor> params_;
  float lr_;
};

// The index and the field of an optimizer state key "state.<i>.<field>" (PyTorch's layout), i below
// `count`. Throws dpe::Error, prefixed by `who`, naming the key unless it has that form, <i> is a
// decimal number of at most 9 digits, and below `count` (`what` names what <i> counts).
std::pair<size_t, std::string> parse_state_key(const std::string& who, const std::string& name,
                                               size_t count, const char* what = "parameter");

}  // namespace dpe::optim
