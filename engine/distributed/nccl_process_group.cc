// NcclProcessGroup on NCCL (built with CUDA; nccl_process_group_stub.cc otherwise).
#include "engine/distributed/nccl_process_group.h"

#include <cuda_runtime.h>
#include <gloo/rendezvous/store.h>
#include <nccl.h>

#include <thread>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/core/error.h"
#include "engine/device/runtime.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_runtime.h"

namespace dpe {
namespace distributed {

namespace {

#define DPE_NCCL_CHECK(call, what)                                                \
  do {                                                                            \
    const ncclResult_t dpe_nccl_ = (call);                                        \
    if (dpe_nccl_ != ncclSuccess) {                                               \
      DPE_THROW(what << ": " #call " failed: " << ncclGetErrorString(dpe_nccl_)); \
    }                                                                             \
  } while (0)

#define DPE_CUDA_RT_CHECK(call, what)                                           \
  do {                                                                          \
    const cudaError_t dpe_cu_ = (call);                                         \
    if (dpe_cu_ != cudaSuccess) {                                               \
      DPE_THROW(what << ": " #call " failed: " << cudaGetErrorString(dpe_cu_)); \
    }                                                                           \
  } while (0)

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kInt64: return ncclInt64;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
  }
  return ncclFloat32;
}

ncclComm_t comm_of(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t stream_of(void* p) { return static_cast<cudaStream_t>(p); }

}  // namespace

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store> store, int rank,
                                   int size, Device device, NcclOptions options)
    : ProcessGroup(rank, size),
      device_(device),
      options_(std::move(options)),
      store_(std::move(store)) {
  const std::string what = "init_process_group (nccl, rank " + std::to_string(rank) + " of " +
                           std::to_string(size) + ", " + device.str() + ")";
  DPE_CHECK(store_ != nullptr, what << ": no store");
  DPE_CHECK(device.is_cuda(), what << ": the nccl backend needs a CUDA device");
  DeviceContext& ctx = Runtime::get().context(device);  // throws naming the device when absent
  cuda::set_device(device.index());
  stream_ = cuda::as_cuda(ctx).kernels().stream();

  const std::string key = options_.prefix + "/nccl_unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    DPE_NCCL_CHECK(ncclGetUniqueId(&id), what);
    store_->set(key, std::vector<char>(id.internal, id.internal + NCCL_UNIQUE_ID_BYTES));
  } else {
    try {
      store_->wait({key}, options_.timeout);
    } catch (const std::exception& e) {
      DPE_THROW(what << ": rank 0 did not publish the NCCL id within " << options_.timeout.count()
                     << " ms: " << e.what());
    }
    const std::vector<char> bytes = store_->get(key);
    DPE_CHECK(bytes.size() == NCCL_UNIQUE_ID_BYTES, what << ": the NCCL id in the store has "
                                                         << bytes.size() << " bytes, expected "
                                                         << NCCL_UNIQUE_ID_BYTES);
    std::copy(bytes.begin(), bytes.end(), id.internal);
  }
  ncclComm_t comm = nullptr;
  DPE_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), what);
  comm_ = comm;
  cudaEvent_t event = nullptr;
  DPE_CUDA_RT_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), what);
  event_ = event;
  barrier_token_ = Tensor::zeros(Shape{1}, DType::kFloat32, device_);
  start_communication();
}

NcclProcessGroup::~NcclProcessGroup() {
  stop_communication();
  // Errors are ignored: this may run at exit, or after the communicator was aborted.
  if (cudaSetDevice(device_.index()) != cudaSuccess) return;
  if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (comm_ != nullptr) ncclCommDestroy(comm_of(comm_));
  cudaGetLastError();
}

void NcclProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  DPE_CHECK(t.defined(), op << " (rank " << rank_ << "): undefined tensor");
  DPE_CHECK(t.device() == device_, op << " (rank " << rank_ << "): expected a tensor on " << device_
                                      << " (the nccl backend), got " << t.device());
  DPE_CHECK(t.is_contiguous(),
            op << " (rank " << rank_ << "): expected a contiguous tensor, got " << t.str());
}

void NcclProcessGroup::issue(const std::string& op, const std::function<void()>& launch) {
  // The communication thread is a plain thread: make the group's device current for NCCL.
  cuda::set_device(device_.index());
  launch();
  wait_for_stream(op);
}

void NcclProcessGroup::wait_for_stream(const std::string& op) {
  const std::string what = "nccl " + op + " (rank " + std::to_string(rank_) + ")";
  auto event = static_cast<cudaEvent_t>(event_);
  DPE_CUDA_RT_CHECK(cudaEventRecord(event, stream_of(stream_)), what);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  while (true) {
    const cudaError_t q = cudaEventQuery(event);
    if (q == cudaSuccess) return;
    DPE_CHECK(q == cudaErrorNotReady, what << ": " << cudaGetErrorString(q));
    ncclResult_t async = ncclSuccess;
    DPE_NCCL_CHECK(ncclCommGetAsyncError(comm_of(comm_), &async), what);
    if (async != ncclSuccess) {
      ncclCommAbort(comm_of(comm_));
      comm_ = nullptr;
      DPE_THROW(what << ": a peer failed: " << ncclGetErrorString(async));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      ncclCommAbort(comm_of(comm_));
      comm_ = nullptr;
      DPE_THROW(what << ": timed out after " << options_.timeout.count()
                     << " ms (a rank is gone or did not join this collective)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void NcclProcessGroup::run_all_reduce(Tensor& tensor, ReduceOp op) {
  issue(std::string("all_reduce(") + reduce_op_name(op) + ")", [&] {
    const size_t n = static_cast<size_t>(tensor.numel());
    if (n == 0) return;
    void* data = tensor.raw_data();
    DPE_NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type(tensor.dtype()), nccl_op(op),
                                 comm_of(comm_), stream_of(stream_)),
                   "nccl all_reduce (rank " << rank_ << ")");
  });
}

void NcclProcessGroup::run_broadcast(Tensor& tensor, int root) {
  issue("broadcast(root=" + std::to_string(root) + ")", [&] {
    if (tensor.numel() == 0) return;
    void* data = tensor.raw_data();
    DPE_NCCL_CHECK(ncclBroadcast(data, data, tensor.nbytes(), ncclChar, root, comm_of(comm_),
                                 stream_of(stream_)),
                   "nccl broadcast (rank " << rank_ << ")");
  });
}

void NcclProcessGroup::run_all_gather(const Tensor& input, Tensor& gathered) {
  issue("all_gather", [&] {
    if (input.numel() == 0) return;
    DPE_NCCL_CHECK(ncclAllGather(input.raw_data(), gathered.raw_data(), input.nbytes(), ncclChar,
                                 comm_of(comm_), stream_of(stream_)),
                   "nccl all_gather (rank " << rank_ << ")");
  });
}

void NcclProcessGroup::run_reduce_scatter(Tensor& output, const Tensor& input, ReduceOp op) {
  issue(std::string("reduce_scatter(") + reduce_op_name(op) + ")", [&] {
    if (output.numel() == 0) return;
    DPE_NCCL_CHECK(ncclReduceScatter(input.raw_data(), output.raw_data(),
                                     static_cast<size_t>(output.numel()),
                                     nccl_type(output.dtype()), nccl_op(op), comm_of(comm_),
                                     stream_of(stream_)),
                   "nccl reduce_scatter (rank " << rank_ << ")");
  });
}

void NcclProcessGroup::run_barrier() { run_all_reduce(barrier_token_, ReduceOp::kSum); }

}  // namespace distributed
}  // namespace dpe
