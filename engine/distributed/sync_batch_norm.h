// SyncBatchNorm: PyTorch's nn.SyncBatchNorm — batch normalisation whose training statistics are
// those of the global batch (every rank's samples), and convert_sync_batchnorm, which swaps every
// BatchNorm2d of a module tree for one.
//
// Design note "global statistics": in training the forward computes per-channel sum, sum of
// squares and count locally, all-reduces them in one tensor, and normalises with the global mean
// and biased variance; the running statistics move with the unbiased global variance. The
// backward all-reduces per-channel sum(gy) and sum(gy * (x - mean)) and forms the input gradient
// with their global means, as PyTorch's SyncBatchNorm.backward. Like PyTorch, the weight and bias
// gradients are this rank's *local* sums: DDP then averages them like any other gradient, which
// gives the global batch's gradient when each rank's loss is the mean over its own samples. The
// input gradient, computed from the ranks' summed gy, is that of the sum of the ranks' losses
// (world_size times the global-batch gradient of the averaged loss); parameters upstream get the
// global gradient once DDP averages theirs. Evaluation uses the running statistics and does not
// communicate. Unlike PyTorch, it runs on host devices (Gloo).
//
// Every rank must run the same SyncBatchNorm layers in the same order (each forward and backward
// in training is a collective on the process group).
//
// Threading contract: a module is used by one thread at a time (as Module); the backward runs
// wherever the autograd engine runs it and blocks on the process group's communication thread.
#pragma once

#include <memory>
#include <string>

#include "engine/distributed/process_group.h"
#include "engine/nn/module.h"

namespace dpe::nn {

class SyncBatchNorm : public Cloneable<SyncBatchNorm> {
 public:
  // process_group null: the default group when one exists at forward time, else this process
  // alone (then it is BatchNorm2d).
  explicit SyncBatchNorm(int64_t num_features, float eps = 1e-5f, float momentum = 0.1f,
                         std::shared_ptr<distributed::ProcessGroup> process_group = nullptr,
                         Device device = {});
  Tensor forward(const Tensor& x) override;
  std::string repr() const override;

  // Replaces every BatchNorm2d in `module`'s tree with a SyncBatchNorm that shares its weight,
  // bias and buffers (so optimizers and checkpoints keep working) and its train/eval mode.
  // Returns `module`, or the replacement when `module` itself is a BatchNorm2d.
  static std::shared_ptr<Module> convert_sync_batchnorm(
      std::shared_ptr<Module> module,
      std::shared_ptr<distributed::ProcessGroup> process_group = nullptr);

 private:
  int64_t channels_;
  float eps_, momentum_;
  std::shared_ptr<distributed::ProcessGroup> group_;
};

// SyncBatchNorm::convert_sync_batchnorm.
std::shared_ptr<Module> convert_sync_batchnorm(
    std::shared_ptr<Module> module,
    std::shared_ptr<distributed::ProcessGroup> process_group = nullptr);

}  // namespace dpe::nn
