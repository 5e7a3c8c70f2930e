// Learning-rate schedules stepped once per epoch: StepLR and CosineAnnealingLR (closed form).
//
// Threading contract: called by the thread that steps the optimizer, between steps.
#pragma once

#include "engine/optim/optimizer.h"

namespace dpe::optim {

class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr()) {}
  virtual ~LRScheduler() = default;
  void step() {
    ++epoch_;
    opt_.set_lr(lr_at(epoch_));
  }
  // For resume: jump to a given epoch count.
  void set_epoch(int64_t epoch) {
    epoch_ = epoch;
    opt_.set_lr(lr_at(epoch_));
  }
  virtual float lr_at(int64_t epoch) const = 0;

 protected:
  Optimizer& opt_;
  float base_lr_;
  int64_t epoch_ = 0;
};

// lr = base * gamma^(epoch / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, float gamma = 0.1f);
  float lr_at(int64_t epoch) const override;

 private:
  int64_t step_size_;
  float gamma_;
};

// lr = eta_min + (base - eta_min) * (1 + cos(pi * epoch / t_max)) / 2
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, float eta_min = 0.0f);
  float lr_at(int64_t epoch) const override;

 private:
  int64_t t_max_;
  float eta_min_;
};

}  // namespace dpe::optim
