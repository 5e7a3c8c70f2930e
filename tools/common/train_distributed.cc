#include "tools/common/train_distributed.h"

#include <cstdlib>

#include "engine/core/error.h"
#include "engine/distributed/distributed.h"
#include "engine/distributed/distributed_data_parallel.h"
#include "engine/distributed/sync_batch_norm.h"

namespace dpe::tools {

Distributed Distributed::init(const std::string& backend, std::chrono::milliseconds timeout) {
  Distributed d;
  const bool under_mpirun = std::getenv("OMPI_COMM_WORLD_RANK") != nullptr;
  const std::string name = backend == "auto" ? (under_mpirun ? "mpi" : "gloo") : backend;
  d.group = distributed::init_process_group(name, "env://", -1, -1, timeout);
  if (name == "nccl") d.device = Device(DeviceType::kCuda, distributed::get_local_rank());
  d.rank = d.group->rank();
  d.world = d.group->size();
  return d;
}

std::shared_ptr<Module> Distributed::wrap(std::shared_ptr<Module> model,
                                          bool gradient_as_bucket_view,
                                          const std::string& overlap,
                                          const std::string& comm_hook) const {
  DPE_CHECK(group != nullptr, "DDP needs a process group (run under //tools:launch)");
  using Overlap = DistributedDataParallelOptions::Overlap;
  DPE_CHECK(overlap == "auto" || overlap == "during" || overlap == "after",
            "overlap must be auto, during or after, got '" << overlap << "'");
  DistributedDataParallelOptions options;
  options.gradient_as_bucket_view = gradient_as_bucket_view;
  options.overlap = overlap == "during"  ? Overlap::kDuringBackward
                    : overlap == "after" ? Overlap::kAfterBackward
                                         : Overlap::kAuto;
  DPE_CHECK(comm_hook == "none" || comm_hook == "bf16" || comm_hook == "fp16",
            "the DDP comm hook must be none, bf16 or fp16, got '" << comm_hook << "'");
  auto ddp = std::make_shared<DistributedDataParallel>(std::move(model), group, options);
  if (comm_hook != "none") {
    ddp->register_comm_hook(comm_hook == "bf16" ? distributed::CommHook::kBf16Compress
                                                : distributed::CommHook::kFp16Compress);
  }
  return ddp;
}

std::shared_ptr<Module> Distributed::convert_sync_batchnorm(std::shared_ptr<Module> model) const {
  DPE_CHECK(group != nullptr, "--sync-bn needs a process group (run under //tools:launch)");
  return nn::convert_sync_batchnorm(std::move(model), group);
}

double Distributed::reduce_mean(double value) const {
  if (!group) return value;
  return sum({value})[0] / world;
}

std::vector<double> Distributed::sum(std::vector<double> values) const {
  if (!group) return values;
  // float64 is not a dpe dtype; float32 is plenty for metrics.
  std::vector<float> f(values.begin(), values.end());
  Tensor t = Tensor::from_vector(f, {static_cast<int64_t>(f.size())}, device);
  group->all_reduce(t, distributed::ReduceOp::kSum);
  const auto r = t.to_vector<float>();
  return std::vector<double>(r.begin(), r.end());
}

void Distributed::barrier() const {
  if (group) group->barrier();
}

}  // namespace dpe::tools
