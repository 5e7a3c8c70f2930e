// functions: the multi-device autograd functions of DataParallel, as PyTorch's
// torch/nn/parallel/_functions.py. Each apply() moves data with comm.h and records one autograd
// node whose backward calls its twin: Scatter <-> Gather, Broadcast <-> ReduceAddCoalesced.
// This is the only place that records multi-device nodes, so "where do gradients return to
// device 0" is answered here: Gather's backward scatters the output gradient to the replicas,
// Broadcast's backward reduce-adds the replicas' parameter gradients onto the source device.
//
// Threading contract: apply() runs on the thread that runs the forward (the caller of
// DataParallel; any thread). A recorded node's backward runs once, on the worker of its first
// output's device (node.h), under no-grad, so calling the twin there records nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/device.h"
#include "engine/parallel/comm.h"
#include "engine/parallel/step_profiler.h"
#include "engine/tensor/tensor.h"

namespace dpe {

// Splits `input` along dim into sizes[k] slices, slice k on devices[k].
// Backward: Gather of the slices' gradients onto the input's device (a missing one counts as
// zero).
struct Scatter {
  static std::vector<Tensor> apply(const Tensor& input, const std::vector<Device>& devices,
                                   const std::vector<int64_t>& sizes, int64_t dim);
};

// Concatenates `inputs` (any devices, same rank) along dim on `destination`.
// Backward: Scatter of the output's gradient back to each input's device, in the inputs' sizes.
struct Gather {
  static Tensor apply(const std::vector<Tensor>& inputs, Device destination, int64_t dim);
};

// out[k][i] is inputs[i] on devices[k]; the inputs share one device (on which out aliases them).
// Backward: ReduceAddCoalesced of every device's gradients onto the inputs' device, timed as
// Phase::kReduceAdd of that device in `profiler` (null: not timed).
struct Broadcast {
  static std::vector<std::vector<Tensor>> apply(const std::vector<Tensor>& inputs,
                                                const std::vector<Device>& devices,
                                                StepProfiler* profiler = nullptr);
};

// out[i] is the sum over k of per_device[k][i] on `destination`; slot i has shape and dtype
// specs[i], and an undefined tensor counts as zero (all out undefined when none is defined).
// Backward: Broadcast of the output gradients back to each k's device (where its tensors live).
struct ReduceAddCoalesced {
  static std::vector<Tensor> apply(const std::vector<std::vector<Tensor>>& per_device,
                                   const std::vector<comm::TensorSpec>& specs, Device destination);
};

}  // namespace dpe
