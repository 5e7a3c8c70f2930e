#include "engine/nn/activation.h"

#include <cstdio>

#include "engine/autograd/ops.h"

namespace dpe::nn {

Tensor ReLU::forward(const Tensor& x) { return ops::relu(x); }

MaxPool2d::MaxPool2d(int64_t kernel_size, int64_t stride, int64_t padding) {
  params_.kernel = kernel_size;
  params_.stride = stride > 0 ? stride : kernel_size;  // PyTorch: stride defaults to kernel_size
  params_.padding = padding;
}

Tensor MaxPool2d::forward(const Tensor& x) { return ops::max_pool2d(x, params_); }

std::string MaxPool2d::repr() const {
  return "MaxPool2d(kernel_size=" + std::to_string(params_.kernel) +
         ", stride=" + std::to_string(params_.stride) +
         ", padding=" + std::to_string(params_.padding) + ")";
}

Tensor Flatten::forward(const Tensor& x) { return ops::flatten(x, start_dim_); }

Dropout::Dropout(float p, uint64_t seed) : p_(p), seeds_(std::make_shared<SeedSource>()) {
  seeds_->gen.manual_seed(seed);
}

void Dropout::reseed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(seeds_->mu);
  seeds_->gen.manual_seed(seed);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training()) return x;
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(seeds_->mu);
    seed = seeds_->gen.next_u64();
  }
  return ops::dropout(x, p_, true, seed);
}

std::string Dropout::repr() const {
  char buf[48];
  std::snprintf(buf, sizeof buf, "Dropout(p=%g)", p_);
  return buf;
}

}  // namespace dpe::nn
