// gather: concatenates the replicas' outputs on one device along `dim`, as PyTorch's
// scatter_gather.gather. Its autograd node sends each slice of the output gradient back to the
// replica that produced it. When every output is a scalar and dim is 0, the scalars become a
// vector (PyTorch warns and does the same). Lists and dicts are gathered element by element.
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
