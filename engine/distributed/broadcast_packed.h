// broadcast_packed: broadcasts many tensors of any dtypes as one flat buffer (one collective),
// as DistributedDataParallel does for the parameters and buffers of rank 0. Not
// comm::broadcast_coalesced (engine/parallel), which copies tensors to the devices of one process.
//
// Threading contract: a collective, called by one thread per rank, at the same point on every
// rank; blocks until the broadcast has finished. The tensors must not be used meanwhile.
#pragma once

#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {

// Broadcasts `tensors` (contiguous, any dtypes, on any devices) from `root` as one flat buffer on
// the first tensor's device (which the group must accept), then copies the values back in place
// on the other ranks.
void broadcast_packed(ProcessGroup& group, const std::vector<Tensor>& tensors, int root = 0);

}  // namespace distributed
}  // namespace dpe
