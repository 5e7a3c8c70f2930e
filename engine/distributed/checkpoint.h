// Checkpoints in a DDP job (seed 004's demo_checkpoint, seed 001's training script): rank 0 alone
// writes the state dict, every rank waits until the file is complete, then each rank loads it
// onto its own device; and the seeds' learning-rate scaling, lr *= world_size.
//
// Threading contract: save_on_main is a collective over the group (every rank calls it at the
// same point, from the thread that drives training); load_everywhere and scaled_lr keep no state.
#pragma once

#include <memory>
#include <string>

#include "engine/distributed/process_group.h"
#include "engine/io/safetensors.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace distributed {

// Rank 0 writes `state` to `path` (safetensors, atomically: see "atomic save"); then every rank
// waits on an all-reduce of rank 0's status, which is the barrier: no rank returns before the file
// is complete, and if rank 0 failed every rank throws (rank 0 with the I/O error). `group` null:
// the default group, or this process alone when there is none.
void save_on_main(const std::string& path, const StateDict& state,
                  const std::shared_ptr<ProcessGroup>& group = nullptr,
                  const SafetensorsMetadata& metadata = {});

// Every rank reads `path` onto its own `device` (PyTorch's map_location): nothing passes through
// rank 0's device. Not a collective. Throws dpe::Error naming the file on any problem.
StateDict load_everywhere(const std::string& path, Device device = {});

// Seed 001: args.lr *= args.world_size, the linear scaling rule for a global batch world_size
// times the per-rank batch. Throws for a world size below 1.
float scaled_lr(float lr, int world_size);
// The same with the default group's world size (1 without one).
float scaled_lr(float lr);

}  // namespace distributed
}  // namespace dpe
