// gather: joins the replicas' outputs on one device along `dim`, as PyTorch's
// scatter_gather.gather. Tensors inside lists and dicts are gathered element by element (the
// replicas' outputs must hold the same tensors in the same structure); other values are the first
// replica's. Each tensor is joined by Gather (functions.h), whose backward sends each slice of the
// gradient back to the replica that produced it. When every output is a scalar and dim is 0, the
// scalars become a vector (PyTorch warns and does the same).
//
// Threading contract: called by the thread that drives the step, after parallel_apply returned.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/device.h"
#include "engine/nn/value.h"
#include "engine/parallel/step_profiler.h"

namespace dpe {

Value gather(const std::vector<Value>& outputs, Device target, int64_t dim,
             StepProfiler* profiler = nullptr);

}  // namespace dpe
