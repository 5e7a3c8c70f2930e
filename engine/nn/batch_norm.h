// BatchNorm2d (and 1d over [N, C]): batch statistics in training with running statistics
// updated by momentum (unbiased variance), running statistics in evaluation, as PyTorch.
//
// Threading contract: as every Module (module.h): one thread at a time per instance.
// DataParallel's replica 0 aliases the original's running statistics and updates them in place,
// as PyTorch's does; the other replicas update copies that are dropped after the step.
#pragma once

#include "engine/nn/module.h"

namespace dpe::nn {

class BatchNorm2d : public Cloneable<BatchNorm2d> {
 public:
  explicit BatchNorm2d(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f,
                       Device device = {});
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) with the ReLU fused into batch norm's passes in training
  // (ops::batch_norm_relu; engine/nn/fusion.h decides when a following ReLU module is fused).
  Tensor forward_relu(const Tensor& x);
  // relu(forward(x) + residual) as one op in training (ops::batch_norm_add_relu), a ResNet
  // block's end.
  Tensor forward_add_relu(const Tensor& x, const Tensor& residual);
  // max_pool2d(relu(forward(x)), kernel_size, stride, padding) as one op in training
  // (ops::batch_norm_relu_max_pool2d).
  Tensor forward_relu_max_pool(const Tensor& x, int64_t kernel_size, int64_t stride,
                               int64_t padding);
  std::string repr() const override;
  int64_t num_features() const { return channels_; }
  float eps() const { return eps_; }
  float momentum() const { return momentum_; }

 protected:
  // Counts a training forward in num_batches_tracked, as PyTorch (not while recomputing).
  void count_batch();
  // The running statistics the op updates: the buffers, or copies of them while a checkpoint
  // recomputes (engine/nn/recompute.h).
  struct RunningStats {
    Tensor mean, var;
  };
  RunningStats running_stats();

  int64_t channels_;
  float eps_, momentum_;
};

}  // namespace dpe::nn
