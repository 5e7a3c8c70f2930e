#include "engine/backend/cuda/cuda_device.h"

#include <map>
#include <mutex>
#include <vector>

#include "engine/core/error.h"
#include "engine/device/memory_stats.h"
#include "kernels/cuda/convert.cuh"
#include "kernels/cuda/copy.cuh"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_runtime.h"
#include "kernels/host/copy.h"

namespace dpe::cuda {

namespace {

// The block size an allocation of `bytes` is served from: powers of two from 512 bytes up to
// 1 MiB, then multiples of 2 MiB. A freed block goes back to the list of its size class, so a
// training loop that allocates the same shapes every step stops calling cudaMalloc after the
// first step.
size_t size_class(size_t bytes) {
  constexpr size_t kMinBlock = 512;
  constexpr size_t kSmallLimit = size_t{1} << 20;
  constexpr size_t kLargeRound = size_t{2} << 20;
  if (bytes <= kSmallLimit) {
    size_t c = kMinBlock;
    while (c < bytes) c *= 2;
    return c;
  }
  return (bytes + kLargeRound - 1) / kLargeRound * kLargeRound;
}

// Reuse is safe without events: every user of a device's memory is ordered with the others (the
// compute stream is a blocking stream and copies use the legacy default stream; see
// kernels/cuda/cuda_context.h), so work queued after a block is handed out again runs after the
// work queued by its previous owner.
class CudaCachingAllocator final : public Allocator {
 public:
  // Allocates on physical GPU `physical` for logical device `device`.
  CudaCachingAllocator(Device device, int physical, int64_t capacity_bytes)
      : Allocator(device, capacity_bytes), physical_(physical) {}

  ~CudaCachingAllocator() override {
    // Runs at exit; the CUDA runtime may already be unloading, so errors are ignored.
    try {
      release_cache();
    } catch (...) {
    }
  }

  int64_t cached_bytes() const {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(cached_);
  }

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    release_locked();
  }

 protected:
  void* raw_allocate(size_t bytes) override {
    const size_t block = size_class(bytes);
    // cudaMalloc makes the device current, and callers rely on it (Tensor::fill_ launches
    // on the current device right after allocating): keep doing so when the cache serves.
    set_device(physical_);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(block);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= block;
      return p;
    }
    void* p = malloc_on(physical_, block);
    if (p == nullptr) {
      // Out of memory: give the cached blocks back to the driver and try once more.
      const size_t released = cached_;
      release_locked();
      p = malloc_on(physical_, block);
      if (p == nullptr) {
        detail::MessageBuilder mb;
        mb << "out of memory on " << device() << ": tried to allocate " << bytes << " bytes ("
           << format_bytes(static_cast<int64_t>(bytes)) << "); cudaMalloc of a " << block
           << "-byte block failed even after releasing " << released << " cached bytes; "
           << stats().current_bytes
           << " bytes are held by tensors on this device (counting this request)";
        throw OutOfMemoryError(mb.str());
      }
    }
    return p;
  }

  void raw_deallocate(void* ptr, size_t bytes) override {
    const size_t block = size_class(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    free_[block].push_back(ptr);
    cached_ += block;
  }

 private:
  void release_locked() {
    if (cached_ == 0) return;
    // Blocks freed by the host may still be read by queued kernels: let them finish first.
    synchronize(physical_);
    for (auto& [block, ptrs] : free_) {
      for (void* p : ptrs) free_on(physical_, p);
      ptrs.clear();
    }
    free_.clear();
    cached_ = 0;
  }

  const int physical_;
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t cached_ = 0;                          // bytes in free_
};

CudaCachingAllocator& caching(Allocator& a) { return static_cast<CudaCachingAllocator&>(a); }

// The physical GPU of a context, or -1 for host memory.
int physical_or_host(DeviceContext& ctx) {
  return ctx.device().is_cuda() ? as_cuda(ctx).physical() : -1;
}

}  // namespace

CudaDeviceContext::CudaDeviceContext(int index, int physical, int64_t capacity_bytes)
    : DeviceContext(Device(DeviceType::kCuda, index),
                    std::make_unique<CudaCachingAllocator>(Device(DeviceType::kCuda, index),
                                                           physical, capacity_bytes),
                    1),
      physical_(physical),
      kernels_(std::make_unique<CudaContext>(physical)) {}

CudaDeviceContext::~CudaDeviceContext() { stop_worker(); }

void CudaDeviceContext::activate_on_this_thread() {
  set_device(physical_);
  std::call_once(peer_once_, [this] {
    // Best effort: without peer access cudaMemcpyPeer still works (staged by the driver), so a
    // refusal must not make entering the device fail.
    try {
      enable_peer_access_from(physical_);
    } catch (const Error&) {
    }
  });
}

void CudaDeviceContext::synchronize() { cuda::synchronize(physical_); }

void CudaDeviceContext::fill(void* dst, const void* value, size_t elem_size, int64_t n) {
  set_device(physical_);
  cuda::fill(kernels_->stream(), dst, value, elem_size, n);
}

void CudaDeviceContext::convert(void* dst, DType dst_dtype, const void* src, DType src_dtype,
                                int64_t n) {
  set_device(physical_);
  cuda::convert(kernels_->stream(), dst, dst_dtype, src, src_dtype, n);
}

bool CudaDeviceContext::copy(DeviceContext& dst_ctx, void* dst, DeviceContext& src_ctx,
                             const StridedView& src) {
  const Device d = dst_ctx.device(), s = src_ctx.device();
  if (!(d.is_cuda() || d.is_host()) || !(s.is_cuda() || s.is_host())) return false;
  const size_t bytes = static_cast<size_t>(src.numel()) * src.elem_size;
  if (bytes == 0) return true;
  const int rank = static_cast<int>(src.sizes.size());
  if (src.is_contiguous()) {
    memcpy_between(dst, physical_or_host(dst_ctx), src.data, physical_or_host(src_ctx), bytes);
    return true;
  }
  if (s.is_host()) {  // a host view: gather it in host memory, then one copy to the device
    std::vector<char> packed(bytes);
    host::strided_copy(packed.data(), src.data, src.elem_size, rank, src.sizes.data(),
                       src.strides.data());
    memcpy_between(dst, physical_or_host(dst_ctx), packed.data(), -1, bytes);
    return true;
  }
  // A view on a CUDA device: gather it with a kernel on that device's compute stream (a blocking
  // stream, so the synchronous copy below starts after it), straight into dst when dst is on the
  // same device, else into a temporary block of the source device.
  CudaDeviceContext& source = as_cuda(src_ctx);
  set_device(source.physical());
  if (d == s) {
    strided_copy(source.kernels().stream(), dst, src.data, src.elem_size, rank, src.sizes.data(),
                 src.strides.data());
    return true;
  }
  void* packed = source.allocator().allocate(bytes);
  try {
    strided_copy(source.kernels().stream(), packed, src.data, src.elem_size, rank, src.sizes.data(),
                 src.strides.data());
    memcpy_between(dst, physical_or_host(dst_ctx), packed, source.physical(), bytes);
  } catch (...) {
    source.allocator().deallocate(packed, bytes);
    throw;
  }
  source.allocator().deallocate(packed, bytes);
  return true;
}

std::unique_lock<std::mutex> CudaDeviceContext::lock_kernels() {
  // Launches, cuBLAS and cuDNN use the calling thread's current device: make it this one (a
  // DeviceGuard may not be active on the calling thread).
  set_device(physical_);
  return std::unique_lock<std::mutex>(kernels_mu_);
}

int64_t CudaDeviceContext::cached_bytes() const {
  return caching(const_cast<Allocator&>(allocator())).cached_bytes();
}

void CudaDeviceContext::empty_cache() { caching(allocator()).release_cache(); }

CudaDeviceContext& as_cuda(DeviceContext& ctx) {
  // Every CUDA device's context is a CudaDeviceContext (the Runtime creates them).
  DPE_CHECK(ctx.device().is_cuda(), "expected the context of a CUDA device, got " << ctx.device());
  return static_cast<CudaDeviceContext&>(ctx);
}

int visible_device_count() { return device_count(nullptr); }

std::string device_count_status() {
  std::string status;
  device_count(&status);
  return status;
}

int64_t physical_memory(int physical) { return static_cast<int64_t>(total_memory(physical)); }

std::unique_ptr<DeviceContext> make_device_context(int index, int physical,
                                                   int64_t capacity_bytes) {
  return std::make_unique<CudaDeviceContext>(index, physical, capacity_bytes);
}

}  // namespace dpe::cuda
