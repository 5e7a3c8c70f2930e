// The process-group side of a training process (//tools:train, and the DDP ranks of bench and
// demo): one process of a DDP job (rank, world size, DDP wrapping, SyncBatchNorm, reductions of
// metrics), or a stand-in for a single process.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "engine/distributed/process_group.h"
#include "engine/nn/module.h"

namespace dpe::tools {

struct Distributed {
  int rank = 0;
  int world = 1;
  Device device;  // where the group's collectives take tensors: cuda:LOCAL_RANK for nccl
  std::shared_ptr<distributed::ProcessGroup> group;  // null for a single process

  static Distributed single() { return {}; }
  // init_process_group(backend, "env://", timeout): "gloo" from the launcher's environment (RANK,
  // MASTER_ADDR, ...), "mpi" from the MPI library under mpirun; "auto": mpi when mpirun started
  // this process (OMPI_COMM_WORLD_RANK is set), else gloo. `timeout` bounds every collective
  // (design note "collective watchdog", engine/distributed/watchdog.h).
  static Distributed init(const std::string& backend = "auto",
                          std::chrono::milliseconds timeout = std::chrono::minutes(30));

  // DistributedDataParallel with PyTorch's defaults, gradient_as_bucket_view as asked, its
  // all-reduces starting as `overlap` says ("auto", "during" or "after" backward), and the comm
  // hook `comm_hook` names: "none" (all-reduce), "bf16" or "fp16" (PyTorch's compress hooks).
  std::shared_ptr<Module> wrap(std::shared_ptr<Module> model, bool gradient_as_bucket_view = false,
                               const std::string& overlap = "auto",
                               const std::string& comm_hook = "none") const;
  std::shared_ptr<Module> convert_sync_batchnorm(std::shared_ptr<Module> model) const;
  double reduce_mean(double value) const;                     // mean over ranks
  std::vector<double> sum(std::vector<double> values) const;  // elementwise sum over ranks
  void barrier() const;
};

}  // namespace dpe::tools
