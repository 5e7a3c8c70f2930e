// GradScaler: torch.amp.GradScaler in C++, loss scaling for float16 training. float16's smallest
// normal is 6e-5, so small gradients of a float16 forward underflow to zero; the loss is scaled
// up before backward, the float32 gradients are scaled back down before the step, and a step
// whose gradients overflowed (an inf or NaN on any device) is skipped while the scale backs off.
//
//   GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);             // optional: to clip the true gradients
//   scaler.step(opt);                 // skipped when a gradient is not finite
//   scaler.update();
//
// PyTorch's defaults and rules: init_scale 2^16, growth_factor 2, backoff_factor 0.5,
// growth_interval 2000; unscale_ at most once per optimizer between updates, step at most once;
// gradients must be float32 (parameters float32 under float16 autocast), as PyTorch's refuses to
// unscale float16 gradients. bfloat16 has float32's exponent range and needs no scaling: scale()
// under bfloat16 autocast is refused (PyTorch runs it, to no purpose).
//
// Threading contract: one thread calls it, as the optimizer it steps.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "engine/tensor/tensor.h"

namespace dpe::optim {

struct GradScalerOptions {
  float init_scale = 65536.0f;
  float growth_factor = 2.0f;   // > 1
  float backoff_factor = 0.5f;  // in (0, 1)
  int64_t growth_interval = 2000;
  bool enabled = true;  // disabled: scale() returns the loss, step() steps, update() does nothing
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale (differentiable; loss a floating tensor).
  Tensor scale(const Tensor& loss);
  // Divides every gradient of opt's parameters by the scale, in place, and records whether any
  // is not finite. Once per optimizer between update()s, and not after step().
  void unscale_(Optimizer& opt);
  // unscale_ unless done, then opt.step() unless a gradient was not finite. Returns whether it
  // stepped. Once per optimizer between update()s.
  bool step(Optimizer& opt);
  // Backs the scale off after a skipped step, grows it after growth_interval steps in a row
  // without one; forgets the optimizers' per-step state. After at least one step or unscale_.
  void update();

  float get_scale() const { return options_.enabled ? scale_ : 1.0f; }
  int64_t growth_tracker() const { return growth_tracker_; }
  bool is_enabled() const { return options_.enabled; }

  // PyTorch's keys: scale, growth_factor, backoff_factor, growth_interval, _growth_tracker.
  StateDict state_dict() const;
  // Checks every entry before it takes any (a dpe::Error naming the key otherwise).
  void load_state_dict(const StateDict& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct Record {
    const Optimizer* opt;
    Stage stage;
    bool found_inf;
  };
  Record& record(const Optimizer& opt);

  GradScalerOptions options_;
  float scale_;
  int64_t growth_tracker_ = 0;
  std::vector<Record> records_;  // the optimizers seen since the last update()
};

}  // namespace dpe::optim
