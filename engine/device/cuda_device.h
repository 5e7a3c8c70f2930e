// The CUDA side of the device registry: discovery, contexts (a caching allocator and the
// device's streams and library handles) and copies. Built as stubs that report no device when
// dpe is compiled without CUDA (--config=nocuda or no toolkit).
//
// Design note "CUDA device context": each cuda:N has one DeviceContext, created by the Runtime on
// first use and kept until exit. It owns a caching allocator (size-class free lists; a freed block
// returns to its list and is reused in stream order, see kernels/cuda/cuda_context.h; on
// cudaErrorMemoryAllocation the cache is released and the allocation retried once) whose
// statistics count the bytes handed to tensors, not the bytes cached; and a cuda::CudaContext
// (compute and copy streams, cuBLAS and cuDNN handles, workspace) created lazily on the first
// backend call. activate_on_this_thread() calls cudaSetDevice and, the first time, enables peer
// access from this device to every device cudaDeviceCanAccessPeer allows.
//
// Threading contract: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/device/device_context.h"

namespace dpe::cuda {

class CudaContext;  // kernels/cuda/cuda_context.h: streams and library handles, no CUDA types

// Visible CUDA devices; 0 on a machine without a GPU (never throws).
int visible_device_count();
// Why the count is what it is ("CUDA driver version is insufficient...", "built without CUDA").
std::string device_count_status();
std::unique_ptr<DeviceContext> make_device_context(int index);
// Copies between host memory and CUDA devices or between CUDA devices. Synchronous: it returns
// after the copy, which starts after the work already queued on the devices involved.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);

// The streams and library handles of a CUDA device's context. Throws dpe::Error for a context
// that is not a CUDA one (or in a build without CUDA).
CudaContext& cuda_context(DeviceContext& ctx);
// Bytes the caching allocator of a CUDA context keeps in its free lists, and a way to give them
// back to the driver (torch.cuda.empty_cache()). Throw as cuda_context() does.
int64_t cached_bytes(DeviceContext& ctx);
void empty_cache(DeviceContext& ctx);

}  // namespace dpe::cuda
