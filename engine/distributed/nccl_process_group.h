// NcclProcessGroup: ProcessGroup on NCCL for tensors on one CUDA device per rank. Rank 0 creates
// an ncclUniqueId and publishes it in the store under "<prefix>/nccl_unique_id"; the other ranks
// read it; all call ncclCommInitRank on `device`. Collectives are queued to the group's
// communication thread (process_group.h), issued there on the device's compute stream (so they
// follow the kernels that produced the tensor), and their Work completes when the collective has
// finished on the GPU. While waiting, the thread polls ncclCommGetAsyncError and a timeout: a
// failed or silent peer aborts the communicator and breaks the group (later collectives throw the
// first error) instead of hanging the rank.
//
// nccl_process_group.cc is built with CUDA; elsewhere BUILD picks nccl_process_group_stub.cc,
// whose constructor throws "nccl: dpe was built without CUDA". Its tests (nccl_process_group_test
// on one rank, ddp_nccl_test on one or two GPUs) skip without a GPU; tools/gpu/run.sh runs them on
// one (README.md, "GPUs", says what has run there).
//
// Threading contract: as ProcessGroup.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/device.h"
#include "engine/distributed/process_group.h"

namespace gloo {
namespace rendezvous {
class Store;
}  // namespace rendezvous
}  // namespace gloo

namespace dpe {
namespace distributed {

struct NcclOptions {
  // Bounds each collective once issued (and the wait for rank 0's id in the store).
  std::chrono::milliseconds timeout = std::chrono::minutes(30);
  // Keys of this group in the store, so several groups can share one store.
  std::string prefix = "default_pg";
};

class NcclProcessGroup : public ProcessGroup {
 public:
  // `device` is this rank's GPU (cuda:LOCAL_RANK in a torchrun-style launch). Blocks until all
  // `size` ranks have joined (ncclCommInitRank).
  NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank, int size,
                   Device device, NcclOptions options = {});
  ~NcclProcessGroup() override;

  std::string backend() const override { return "nccl"; }

 protected:
  // float32 (sum, avg, max, min) or int64 (sum, max, min), contiguous, on the group's device.
  void run_all_reduce(Tensor& tensor, ReduceOp op) override;
  void run_broadcast(Tensor& tensor, int root) override;
  void run_all_gather(const Tensor& input, Tensor& gathered) override;
  void run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) override;
  // NCCL has no barrier: a one-element all-reduce that every rank must join.
  void run_barrier() override;
  void check_tensor(const char* op, const Tensor& t) const override;

 private:
  // On the communication thread: makes the group's device current, runs `launch` (which queues
  // NCCL calls on the stream), then waits until the stream is done, polling for NCCL errors and
  // the timeout.
  void issue(const std::string& op, const std::function<void()>& launch);
  void wait_for_stream(const std::string& op);

  const Device device_;
  NcclOptions options_;
  std::shared_ptr<gloo::rendezvous::Store> store_;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t: the device's compute stream
  void* event_ = nullptr;   // cudaEvent_t, used on the communication thread only
  Tensor barrier_token_;    // run_barrier's one element, on device_
};

}  // namespace distributed
}  // namespace dpe
