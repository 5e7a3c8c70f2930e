// Module fusion: a BatchNorm2d followed by a ReLU runs as one op (ops::batch_norm_relu) wherever a
// model chains the two: nn::Sequential does it for adjacent children, and models that call their
// modules by hand (ResNet) call forward_batch_norm_relu. The result, the gradients, the modules
// and their state-dict keys are those of the two modules run one after the other; what changes is
// the work: in training the ReLU is applied in batch norm's output pass and its mask recomputed in
// batch norm's backward, so the pre-ReLU tensor and the ReLU's two passes over memory go away
// (design note in docs/fusion.md).
//
// Only those exact classes fuse: a subclass, or another module in either place (SyncBatchNorm
// after convert_sync_batchnorm, a user's own ReLU), runs its own forward. Only host devices fuse:
// the CUDA backend has no fused kernel yet, and its slot composes the two ops with one more pass.
// set_fusion_enabled(false) turns fusion off for the process: //tools:bench --fuse false measures
// the difference, and the cost model traces unfused steps, as PyTorch's eager mode runs them.
#pragma once

#include "engine/nn/module.h"

namespace dpe::nn {

// On by default; for every thread (the switch is read at each forward).
void set_fusion_enabled(bool enabled);
bool fusion_enabled();

// Sets fusion on or off until the end of its scope, then restores what was there.
class FusionScope {
 public:
  explicit FusionScope(bool enabled) : previous_(fusion_enabled()) { set_fusion_enabled(enabled); }
  ~FusionScope() { set_fusion_enabled(previous_); }
  FusionScope(const FusionScope&) = delete;
  FusionScope& operator=(const FusionScope&) = delete;

 private:
  bool previous_;
};

// True when `norm` is a BatchNorm2d and `activation` a ReLU, both exactly.
bool fuses_batch_norm_relu(const Module& norm, const Module& activation);

// activation.forward(norm.forward(x)), fused when fusion is enabled, fuses_batch_norm_relu and x
// is on a host device.
Tensor forward_batch_norm_relu(Module& norm, Module& activation, const Tensor& x);

}  // namespace dpe::nn
