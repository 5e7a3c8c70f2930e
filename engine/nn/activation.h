// Stateless layers: ReLU, MaxPool2d, Flatten, Dropout.
#pragma once

#include "engine/backend/backend.h"
#include "engine/nn/module.h"
#include "engine/tensor/random.h"

namespace dpe::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "ReLU()"; }
};

class MaxPool2d : public Cloneable<MaxPool2d> {
 public:
  explicit MaxPool2d(int64_t kernel_size, int64_t stride = 0, int64_t padding = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;

 private:
  Pool2dParams params_;
};

class Flatten : public Cloneable<Flatten> {
 public:
  explicit Flatten(int64_t start_dim = 1) : start_dim_(start_dim) {}
  Tensor forward(const Tensor& x) override;
  std::string repr() const override { return "Flatten(start_dim=" + std::to_string(start_dim_) + ")"; }

 private:
  int64_t start_dim_;
};

// Dropout with its own seeded generator; replicas made by DataParallel get distinct streams.
class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0) : p_(p), gen_(seed) {}
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  void reseed(uint64_t seed) { gen_.manual_seed(seed); }

 private:
  float p_;
  Generator gen_;
};

}  // namespace dpe::nn
