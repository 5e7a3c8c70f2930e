#include "engine/nn/dropout.h"

#include <cstdio>

#include "engine/autograd/ops.h"

namespace dpe::nn {

Dropout::Dropout(float p, uint64_t seed) : p_(p), seeds_(std::make_shared<SeedSource>()) {
  seeds_->gen.manual_seed(seed);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training()) return x;
  // Through draw_seed so that a checkpoint's recompute draws the same mask (random.h, "seed replay").
  const uint64_t seed = draw_seed([this] {
    std::lock_guard<std::mutex> lock(seeds_->mu);
    return seeds_->gen.next_u64();
  });
  return ops::dropout(x, p_, true, seed);
}

std::string Dropout::repr() const {
  char buf[48];
  std::snprintf(buf, sizeof buf, "Dropout(p=%g)", p_);
  return buf;
}

}  // namespace dpe::nn
