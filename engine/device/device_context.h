// DeviceContext: everything one device owns, and the device interface each device type
// implements in its folder (engine/backend/host, engine/backend/cuda), as ggml's buffer interface
// owns alloc/copy/clear: memory (an Allocator with the accounting the imbalance report reads),
// copies in and out of that memory (strided, between devices), fills, synchronisation, and making
// the device current on a thread. Its worker thread runs the device's share of parallel work.
// Operations on tensors are the other half of a device type: its Backend (engine/backend).
//
// Threading contract: every method may be called from any thread. The slots are thread-safe in
// every implementation; a context lives until exit (the Runtime never destroys one in use).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/core/dtype.h"
#include "engine/device/allocator.h"
#include "engine/device/device.h"

namespace dpe {

class Worker;  // engine/device/worker.h (kept out of this header: it brings in oneTBB)

// A (possibly strided) view in some device's memory: `data` points at its first element; sizes and
// strides count elements of elem_size bytes.
struct StridedView {
  const void* data = nullptr;
  size_t elem_size = 1;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;

  // `bytes` contiguous bytes.
  static StridedView bytes(const void* data, size_t bytes);
  int64_t numel() const;
  bool is_contiguous() const;
};

class DeviceContext {
 public:
  virtual ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  Device device() const { return device_; }
  Allocator& allocator() { return *allocator_; }
  const Allocator& allocator() const { return *allocator_; }
  // Started on first use, so a derived context is fully constructed before its thread runs.
  Worker& worker();
  int compute_threads() const { return compute_threads_; }
  // How long its worker spins before sleeping (Worker::spin); set before the worker starts.
  void set_worker_spin(std::chrono::nanoseconds spin) { worker_spin_ = spin; }

  // --- the device interface: one slot per operation a device type implements ---

  // Makes this device current on the calling thread (called by DeviceGuard): the OpenMP team size
  // its host kernels use (host), or the current CUDA device (cuda).
  virtual void activate_on_this_thread() = 0;
  // Returns when all work queued on the device has finished (CUDA streams; nothing on host).
  virtual void synchronize() = 0;
  // Gives the allocator's cached free blocks back to the system (torch.cuda.empty_cache());
  // memory in use stays valid.
  virtual void empty_cache() {}
  // Sets n elements of elem_size bytes (1, 2, 4 or 8) at dst, in this device's memory, to the
  // bytes at `value` (host memory). Ordered after the work already queued on the device.
  virtual void fill(void* dst, const void* value, size_t elem_size, int64_t n) = 0;
  // Converts n contiguous elements at src (of src_dtype) into dst (of dst_dtype), both in this
  // device's memory: to bfloat16 and float16 with round-to-nearest-even, as PyTorch's. Ordered
  // after the work already queued on the device.
  virtual void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                       int64_t n) = 0;
  // Copies the view `src` (in the memory of src_ctx's device) into contiguous memory at dst (in
  // the memory of dst_ctx's device), when this device type can do that pair: one of the two
  // contexts is this one. Returns false when it cannot (the Runtime then asks the other side).
  // Synchronous for the caller: a host read of dst after the call sees the data.
  virtual bool copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                    const StridedView& src) = 0;

 protected:
  DeviceContext(Device device, std::unique_ptr<Allocator> allocator, int compute_threads);
  // Drains and joins the worker. A derived context calls it first in its destructor, so no task
  // still running on the worker sees the derived members destroyed.
  void stop_worker();

 private:
  const Device device_;
  std::unique_ptr<Allocator> allocator_;
  const int compute_threads_;
  std::chrono::nanoseconds worker_spin_{0};
  // Declared last: the worker thread uses the members above and is joined first on destruction.
  std::once_flag worker_once_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace dpe
