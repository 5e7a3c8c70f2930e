// Optimizer: the parameters it updates in place and their per-parameter state; SGD and Adam/AdamW
// derive from it. Updates run on each parameter's device through its backend.
//
// Parameters may be float32 or 16-bit (bfloat16, float16). A 16-bit parameter's update runs on a
// float32 master copy held here (optimizer state, as mixed-precision training's "master weights"),
// which is rounded to nearest even into the parameter after each step; its gradient is read
// through a float32 conversion. The master is taken from the parameter at its first step, and
// taken again whenever the parameter was written since the last step (a checkpoint loaded into
// the model, say), so the parameter's value is never overridden by a stale copy.
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
  const std::vector<Tensor>& params() const { return params_; }

  // Parameter i's value in float32: its master copy when it is 16-bit and has one, else the
  // parameter itself (float32) or its float32 conversion. What a checkpoint saves.
  Tensor master_weight(size_t i) const;
  // Sets parameter i from a float32 value (a checkpoint's): the master takes it exactly and the
  // parameter its rounding. Throws dpe::Error naming i unless v is float32 of the parameter's
  // shape; nothing changes then.
  void load_master_weight(size_t i, const Tensor& v);
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

  // The float32 tensor parameter i's update writes: the parameter itself when it is float32,
  // else its master copy (made or refreshed here).
  Tensor& update_target(size_t i);
  // The gradient as a contiguous float32 tensor (a conversion of a 16-bit one).
  static Tensor float32_grad(const Tensor& g);
  // After parameter i's update: rounds its master into it (nothing for a float32 parameter).
  void publish(size_t i);

  std::vector<Tensor> params_;
  float lr_;

 private:
  std::vector<Tensor> masters_;              // float32 copies of 16-bit parameters
  std::vector<uint64_t> published_version_;  // the parameter's version after the last publish
};

// The index and the field of an optimizer state key "state.<i>.<field>" (PyTorch's layout), i below
// `count`. Throws dpe::Error, prefixed by `who`, naming the key unless it has that form, <i> is a
// decimal number of at most 9 digits, and below `count` (`what` names what <i> counts).
std::pair<size_t, std::string> parse_state_key(const std::string& who, const std::string& name,
                                               size_t count, const char* what = "parameter");

}  // namespace dpe::optim
