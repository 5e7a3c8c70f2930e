// verify_params_across_processes: the check DistributedDataParallel runs at construction that
// every rank holds the same parameters (count, names, shapes, requires_grad), as PyTorch's
// dist._verify_params_across_processes.
//
// Threading contract: a collective, called by one thread per rank, at the same point on every
// rank; it runs the group's collectives (process_group.h) and blocks until they finish.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "engine/device/device.h"
#include "engine/distributed/process_group.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {

// An all-gather of a hash of the signature, then of the full signature only when the hashes
// differ: then every rank throws the same dpe::Error naming the first parameter (lowest index)
// that differs and the two ranks. The small tensors it exchanges live on `device` (the module's):
// the one a process group of any backend accepts.
void verify_params_across_processes(ProcessGroup& group,
                                    const std::vector<std::pair<std::string, Tensor>>& params,
                                    Device device);

}  // namespace distributed
}  // namespace dpe
