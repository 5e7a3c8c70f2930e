// Stateless layers: ReLU, MaxPool2d, Flatten, Dropout.
#pragma once

#include <memory>
#include <mutex>

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

// Dropout with a seeded generator. Copies (DataParallel's replicas) share the generator, so each
// forward, on any replica, draws a fresh mask seed from it.
class Dropout : public Cloneable<Dropout> {
 public:
  explicit Dropout(float p = 0.5f, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;
  void reseed(uint64_t seed);

 private:
  struct SeedSource {
    std::mutex mu;
    Generator gen;
  };
  float p_;
  std::shared_ptr<SeedSource> seeds_;
};

}  // namespace dpe::nn
