#include "engine/optim/lr_scheduler.h"

#include <cmath>

#include "engine/core/error.h"

namespace dpe::optim {

StepLR::StepLR(Optimizer& opt, int64_t step_size, float gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  DPE_CHECK(step_size > 0, "StepLR: step_size must be positive, got " << step_size);
}

float StepLR::lr_at(int64_t epoch) const {
  return base_lr_ * std::pow(gamma_, static_cast<float>(epoch / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, float eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  DPE_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got " << t_max);
}

float CosineAnnealingLR::lr_at(int64_t epoch) const {
  const double c = std::cos(M_PI * static_cast<double>(epoch) / static_cast<double>(t_max_));
  return eta_min_ + (base_lr_ - eta_min_) * static_cast<float>((1.0 + c) / 2.0);
}

}  // namespace dpe::optim
