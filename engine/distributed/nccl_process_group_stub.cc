// NcclProcessGroup where CUDA is not built: the constructor throws, so nothing else runs.
#include "engine/core/error.h"
#include "engine/distributed/nccl_process_group.h"

namespace dpe {
namespace distributed {

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store>, int rank, int size,
                                   Device device, NcclOptions options)
    : ProcessGroup(rank, size), device_(device), options_(std::move(options)) {
  DPE_THROW("init_process_group (nccl, rank " << rank << " of " << size << ", " << device
                                              << "): nccl: dpe was built without CUDA");
}

NcclProcessGroup::~NcclProcessGroup() = default;

void NcclProcessGroup::check_tensor(const char*, const Tensor&) const {}
void NcclProcessGroup::run_all_reduce(Tensor&, ReduceOp) {}
void NcclProcessGroup::run_broadcast(Tensor&, int) {}
void NcclProcessGroup::run_all_gather(const Tensor&, Tensor&) {}
void NcclProcessGroup::run_reduce_scatter(Tensor&, const Tensor&, ReduceOp) {}
void NcclProcessGroup::run_barrier() {}

}  // namespace distributed
}  // namespace dpe
