// Dropout with a seeded generator: zeroes each element with probability p in training and scales
// the rest by 1/(1-p); the identity in eval.
//
// Threading contract: forward may run on several device workers at once, one replica each.
// Copies (DataParallel's replicas) share the generator behind a mutex, so each forward, on any
// replica, draws a fresh mask seed from it.
#pragma once

#include <memory>
#include <mutex>

#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;

 private:
  struct SeedSource {
    std::mutex mu;
    Generator gen;
  };
  float p_;
  std::shared_ptr<SeedSource> seeds_;
};

}  // namespace dpe::nn
