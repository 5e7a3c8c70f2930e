// Recompute: whether this thread is re-running a forward for activation checkpointing's backward
// (engine/nn/checkpoint.h), for the layers whose forward has effects beyond its output.
//
// Design note "no second running-statistics update": PyTorch's checkpoint re-runs BatchNorm's
// forward in the backward, updating running_mean/var and num_batches_tracked a second time (a
// known quirk). Here BatchNorm2d still normalises with the batch's statistics while recomputing
// (the gradients must match the first run's) but leaves its buffers as the first run left them,
// so a checkpointed model's running statistics equal an unchecked one's.
//
// Threading contract: the flag is per thread; a RecomputeScope restores it on the thread that
// made it.
#pragma once

namespace dpe::nn {

bool recomputing();

class RecomputeScope {
 public:
  RecomputeScope();
  ~RecomputeScope();
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  bool previous_;
};

}  // namespace dpe::nn
