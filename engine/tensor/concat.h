// concat: tensors joined along one dim into a new tensor on one device, copied from wherever they
// are; the data op under ops::cat (differentiable) and comm::gather (DataParallel's).
//
// Threading contract: a pure function of its inputs; as Tensor's copies.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/device/device.h"
#include "engine/tensor/tensor.h"

namespace dpe {

// xs (non-empty, one dtype and rank, equal sizes but along dim) joined along dim on `device`, or
// on xs[0]'s device where it is null; `op` names the caller in the errors. Built along dim 0 of
// the layout with dim first, where every input is one contiguous slice, then permuted back into a
// contiguous tensor.
Tensor concat(const char* op, const std::vector<Tensor>& xs, int64_t dim, const Device* device);

}  // namespace dpe
