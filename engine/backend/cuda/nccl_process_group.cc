#include "engine/backend/cuda/nccl_process_group.h"

#include <gloo/rendezvous/store.h>

#include "engine/core/error.h"

#if DPE_WITH_CUDA
#include <cuda_runtime.h>
#include <nccl.h>

#include <thread>

#include "engine/backend/cuda/cuda_device.h"
#include "engine/device/runtime.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_runtime.h"
#endif

namespace dpe {
namespace distributed {

#if DPE_WITH_CUDA

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

ncclDataType_t nccl_type(DType dtype) { return dtype == DType::kInt64 ? ncclInt64 : ncclFloat32; }

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
  queue_ = std::make_unique<WorkQueue>("nccl process group (rank " + std::to_string(rank) + ")");
}

NcclProcessGroup::~NcclProcessGroup() {
  queue_.reset();
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

std::shared_ptr<Work> NcclProcessGroup::enqueue(const std::string& op, std::function<void()> fn) {
  return queue_->submit([this, op, fn = std::move(fn)] {
    {
      std::lock_guard<std::mutex> lock(broken_mu_);
      DPE_CHECK(broken_.empty(), "nccl " << op << " (rank " << rank_
                                         << "): the process group failed earlier: " << broken_);
    }
    try {
      // The communication thread is a plain thread: make the group's device current for NCCL.
      cuda::set_device(device_.index());
      fn();
      wait_for_stream(op);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(broken_mu_);
      if (broken_.empty()) broken_ = e.what();
      throw;
    }
  });
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

std::shared_ptr<Work> NcclProcessGroup::all_reduce_async(Tensor tensor, ReduceOp op) {
  check_tensor("all_reduce", tensor);
  const DType dtype = tensor.dtype();
  DPE_CHECK(dtype == DType::kFloat32 || op != ReduceOp::kAvg,
            "all_reduce (rank " << rank_ << "): op avg needs float32, got " << dtype_name(dtype));
  return enqueue(std::string("all_reduce(") + reduce_op_name(op) + ")", [this, tensor, op, dtype] {
    const size_t n = static_cast<size_t>(tensor.numel());
    if (n == 0) return;
    void* data = tensor.raw_data();
    DPE_NCCL_CHECK(ncclAllReduce(data, data, n, nccl_type(dtype), nccl_op(op), comm_of(comm_),
                                 stream_of(stream_)),
                   "nccl all_reduce (rank " << rank_ << ")");
  });
}

std::shared_ptr<Work> NcclProcessGroup::broadcast_async(Tensor tensor, int root) {
  check_tensor("broadcast", tensor);
  DPE_CHECK(root >= 0 && root < size_,
            "broadcast (rank " << rank_ << "): root " << root << " is outside 0.." << size_ - 1);
  return enqueue("broadcast(root=" + std::to_string(root) + ")", [this, tensor, root] {
    if (tensor.numel() == 0) return;
    void* data = tensor.raw_data();
    DPE_NCCL_CHECK(ncclBroadcast(data, data, tensor.nbytes(), ncclChar, root, comm_of(comm_),
                                 stream_of(stream_)),
                   "nccl broadcast (rank " << rank_ << ")");
  });
}

void NcclProcessGroup::all_gather(const Tensor& input, std::vector<Tensor>& outputs) {
  check_tensor("all_gather", input);
  prepare_gather_outputs(input, outputs);
  const int64_t n = input.numel();
  Tensor gathered = Tensor::empty(Shape{n * size_}, input.dtype(), device_);
  enqueue("all_gather", [this, input, gathered] {
    if (input.numel() == 0) return;
    DPE_NCCL_CHECK(ncclAllGather(input.raw_data(), gathered.raw_data(), input.nbytes(), ncclChar,
                                 comm_of(comm_), stream_of(stream_)),
                   "nccl all_gather (rank " << rank_ << ")");
  })->wait();
  for (int r = 0; r < size_; ++r)
    outputs[r].copy_(gathered.narrow(0, r * n, n).view(input.shape()));
}

void NcclProcessGroup::barrier() {
  // NCCL has no barrier: a one-element all-reduce that every rank must join.
  Tensor token = Tensor::zeros(Shape{1}, DType::kFloat32, device_);
  all_reduce_async(token, ReduceOp::kSum)->wait();
}

#else  // built without CUDA

NcclProcessGroup::NcclProcessGroup(std::shared_ptr<gloo::rendezvous::Store>, int rank, int size,
                                   Device device, NcclOptions options)
    : ProcessGroup(rank, size), device_(device), options_(std::move(options)) {
  DPE_THROW("init_process_group (nccl, rank " << rank << " of " << size << ", " << device
                                              << "): nccl: dpe was built without CUDA");
}

NcclProcessGroup::~NcclProcessGroup() = default;

void NcclProcessGroup::check_tensor(const char*, const Tensor&) const {}
std::shared_ptr<Work> NcclProcessGroup::enqueue(const std::string&, std::function<void()>) {
  DPE_THROW("nccl: dpe was built without CUDA");
}
void NcclProcessGroup::wait_for_stream(const std::string&) {}
std::shared_ptr<Work> NcclProcessGroup::all_reduce_async(Tensor, ReduceOp) {
  DPE_THROW("nccl: dpe was built without CUDA");
}
std::shared_ptr<Work> NcclProcessGroup::broadcast_async(Tensor, int) {
  DPE_THROW("nccl: dpe was built without CUDA");
}
void NcclProcessGroup::all_gather(const Tensor&, std::vector<Tensor>&) {
  DPE_THROW("nccl: dpe was built without CUDA");
}
void NcclProcessGroup::barrier() { DPE_THROW("nccl: dpe was built without CUDA"); }

#endif

}  // namespace distributed
}  // namespace dpe
