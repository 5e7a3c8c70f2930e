// The CUDA device type's DeviceContext and device discovery. Without CUDA (--config=nocuda or no
// toolkit) cuda_device_stub.cc defines the functions below to report no device.
//
// Design note "CUDA device context": each cuda:N has one CudaDeviceContext, created by the Runtime
// on first use and kept until exit. It owns a caching allocator (size-class free lists; a freed
// block returns to its list and is reused in stream order, see kernels/cuda/cuda_context.h; on
// cudaErrorMemoryAllocation the cache is released and the allocation retried once) whose
// statistics count the bytes handed to tensors, not the bytes cached; and a cuda::CudaContext
// (compute and copy streams, cuBLAS and cuDNN handles, workspace) created lazily on first use.
// activate_on_this_thread() calls cudaSetDevice and, the first time, enables peer access from this
// device to every device cudaDeviceCanAccessPeer allows. Copies of strided views run a gather
// kernel on the source device (kernels/cuda/copy.cuh); no device memory goes through the host.
//
// Threading contract: every function and method may be called from any thread; lock_kernels()
// serialises the CUDA backend's calls on one device (the workspace is shared by its launchers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "engine/device/device_context.h"

namespace dpe::cuda {

class CudaContext;  // kernels/cuda/cuda_context.h: streams and library handles, no CUDA types

// Visible physical CUDA devices; 0 on a machine without a GPU (never throws).
int visible_device_count();
// Why the count is what it is ("CUDA driver version is insufficient...", "built without CUDA").
std::string device_count_status();
// The total memory of physical device `physical`, in bytes.
int64_t physical_memory(int physical);
// The context of cuda:`index`, which runs on physical device `physical` (the same unless logical
// devices share a GPU, cuda_devices.cc) with at most `capacity_bytes` held by tensors (0: no cap).
std::unique_ptr<DeviceContext> make_device_context(int index, int physical, int64_t capacity_bytes);

class CudaDeviceContext final : public DeviceContext {
 public:
  CudaDeviceContext(int index, int physical, int64_t capacity_bytes);
  ~CudaDeviceContext() override;

  void activate_on_this_thread() override;
  void synchronize() override;
  void fill(void* dst, const void* value, size_t elem_size, int64_t n) override;
  void convert(void* dst, DType dst_dtype, const void* src, DType src_dtype, int64_t n) override;
  // Between this device and host memory or another CUDA device, in either direction.
  bool copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
            const StridedView& src) override;

  // The kernels' context (streams, handles, workspace), used under the returned lock for one
  // backend call. Makes this device current on the calling thread.
  std::unique_lock<std::mutex> lock_kernels();
  CudaContext& kernels() { return *kernels_; }

  // Bytes the caching allocator keeps in its free lists, and a way to give them back to the
  // driver (torch.cuda.empty_cache()).
  int64_t cached_bytes() const;
  void empty_cache() override;

  // The physical GPU this device runs on: cuda:N's own index unless logical devices share GPUs.
  int physical() const { return physical_; }

 private:
  const int physical_;
  std::unique_ptr<CudaContext> kernels_;
  std::mutex kernels_mu_;
  std::once_flag peer_once_;
};

// The CUDA context of `ctx`; throws dpe::Error naming the device when it is not a CUDA device's
// (or in a build without CUDA).
CudaDeviceContext& as_cuda(DeviceContext& ctx);

}  // namespace dpe::cuda
