// replicate: copies of a module on several devices for one DataParallel forward, as PyTorch's
// torch/nn/parallel/replicate.py. Parameters reach the replicas through Broadcast (functions.h),
// so backward sums every replica's gradients onto the source device (ReduceAddCoalesced) and from
// there into the original parameters' .grad. Buffers are copied without autograd (comm.h); replica
// 0 uses the original buffers themselves, so its in-place updates (BatchNorm running statistics)
// persist and the other replicas' are lost, exactly as in PyTorch.
//
// Threading contract: called by the thread that drives the step; the replicas may then be used
// concurrently, one per thread.
#pragma once

#include <memory>
#include <vector>

#include "engine/nn/module.h"
#include "engine/parallel/step_profiler.h"

namespace dpe {

// devices[0] must be where the module's parameters and buffers live.
std::vector<std::shared_ptr<Module>> replicate(const Module& module,
                                               const std::vector<Device>& devices,
                                               StepProfiler* profiler = nullptr);

}  // namespace dpe
