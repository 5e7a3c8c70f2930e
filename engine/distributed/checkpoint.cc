// save_on_main, load_everywhere and scaled_lr: see checkpoint.h.
#include "engine/distributed/checkpoint.h"

#include <exception>
#include <vector>

#include "engine/core/error.h"
#include "engine/distributed/distributed.h"

namespace dpe {
namespace distributed {

void save_on_main(const std::string& path, const StateDict& state,
                  const std::shared_ptr<ProcessGroup>& group, const SafetensorsMetadata& metadata) {
  std::shared_ptr<ProcessGroup> g = group;
  if (!g && is_initialized()) g = default_group();
  const int rank = g ? g->rank() : 0;
  std::string error;
  if (rank == 0) {
    try {
      SafetensorsSaveOptions options;
      options.metadata = metadata;
      save_safetensors(path, state, options);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (g && g->size() > 1) {
    // On the state's device, which a group of any backend accepts (host for gloo, the GPU for
    // nccl).
    const Device device = state.empty() ? Device() : state.front().second.device();
    Tensor status =
        Tensor::from_vector(std::vector<int64_t>{error.empty() ? 0 : 1}, Shape{1}, device);
    g->all_reduce(status, ReduceOp::kMax);
    DPE_CHECK(rank == 0 || status.to_vector<int64_t>()[0] == 0,
              "save_on_main (rank " << rank << "): rank 0 failed to write " << path
                                    << " (its error says why)");
  }
  DPE_CHECK(error.empty(), "save_on_main (rank 0): " << error);
}

StateDict load_everywhere(const std::string& path, Device device) {
  return load_safetensors(path, device);
}

float scaled_lr(float lr, int world_size) {
  DPE_CHECK(world_size >= 1, "scaled_lr: world size " << world_size << " must be at least 1");
  return lr * static_cast<float>(world_size);
}

float scaled_lr(float lr) { return scaled_lr(lr, get_world_size()); }

}  // namespace distributed
}  // namespace dpe
