#include "engine/device/cuda_device.h"

#include "engine/core/error.h"

#if DPE_WITH_CUDA
#include <map>
#include <mutex>
#include <vector>

#include "engine/device/memory_stats.h"
#include "kernels/cuda/cuda_context.h"
#include "kernels/cuda/device_runtime.h"
#endif

namespace dpe::cuda {

#if DPE_WITH_CUDA

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
  using Allocator::Allocator;

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
    // cudaMalloc made the device current, and callers came to rely on it (Tensor::fill_ launches
    // on the current device right after allocating): keep doing so when the cache serves.
    set_device(device().index());
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(block);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= block;
      return p;
    }
    void* p = malloc_on(device().index(), block);
    if (p == nullptr) {
      // Out of memory: give the cached blocks back to the driver and try once more.
      const size_t released = cached_;
      release_locked();
      p = malloc_on(device().index(), block);
      DPE_CHECK(p != nullptr, "out of memory on "
                                  << device() << ": tried to allocate " << bytes << " bytes ("
                                  << format_bytes(static_cast<int64_t>(bytes))
                                  << "); cudaMalloc of a " << block
                                  << "-byte block failed even after releasing " << released
                                  << " cached bytes; " << stats().current_bytes
                                  << " bytes are held by tensors on this device (counting this "
                                     "request)");
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
    synchronize(device().index());
    for (auto& [block, ptrs] : free_) {
      for (void* p : ptrs) free_on(device().index(), p);
      ptrs.clear();
    }
    free_.clear();
    cached_ = 0;
  }

  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;  // size class -> free blocks
  size_t cached_ = 0;                          // bytes in free_
};

class CudaDeviceContext final : public DeviceContext {
 public:
  explicit CudaDeviceContext(int index)
      : DeviceContext(Device(DeviceType::kCuda, index),
                      std::make_unique<CudaCachingAllocator>(Device(DeviceType::kCuda, index), 0),
                      1),
        cuda_(index) {}

  void activate_on_this_thread() override {
    set_device(device().index());
    std::call_once(peer_once_, [this] {
      // Best effort: without peer access cudaMemcpyPeer still works (staged by the driver), so
      // a refusal must not make entering the device fail.
      try {
        enable_peer_access_from(device().index());
      } catch (const Error&) {
      }
    });
  }
  void synchronize() override { cuda::synchronize(device().index()); }

  CudaContext& cuda() { return cuda_; }
  CudaCachingAllocator& caching_allocator() {
    return static_cast<CudaCachingAllocator&>(allocator());
  }

 private:
  CudaContext cuda_;
  std::once_flag peer_once_;
};

CudaDeviceContext& as_cuda(DeviceContext& ctx) {
  auto* c = dynamic_cast<CudaDeviceContext*>(&ctx);
  DPE_CHECK(c != nullptr, "expected the context of a CUDA device, got " << ctx.device());
  return *c;
}

}  // namespace

int visible_device_count() { return device_count(nullptr); }

std::string device_count_status() {
  std::string status;
  device_count(&status);
  return status;
}

std::unique_ptr<DeviceContext> make_device_context(int index) {
  return std::make_unique<CudaDeviceContext>(index);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  memcpy_between(dst, dst_device.is_cuda() ? dst_device.index() : -1, src,
                 src_device.is_cuda() ? src_device.index() : -1, bytes);
}

CudaContext& cuda_context(DeviceContext& ctx) { return as_cuda(ctx).cuda(); }

int64_t cached_bytes(DeviceContext& ctx) { return as_cuda(ctx).caching_allocator().cached_bytes(); }

void empty_cache(DeviceContext& ctx) { as_cuda(ctx).caching_allocator().release_cache(); }

#else  // built without CUDA

int visible_device_count() { return 0; }

std::string device_count_status() { return "dpe was built without CUDA (--config=nocuda)"; }

std::unique_ptr<DeviceContext> make_device_context(int index) {
  DPE_THROW("cuda:" << index << " is not available: " << device_count_status());
}

void copy_bytes(void*, Device dst_device, const void*, Device src_device, size_t) {
  DPE_THROW("cannot copy from " << src_device << " to " << dst_device << ": "
                                << device_count_status());
}

CudaContext& cuda_context(DeviceContext& ctx) {
  DPE_THROW("no CUDA context for " << ctx.device() << ": " << device_count_status());
}

int64_t cached_bytes(DeviceContext& ctx) {
  DPE_THROW("no CUDA allocator for " << ctx.device() << ": " << device_count_status());
}

void empty_cache(DeviceContext& ctx) {
  DPE_THROW("no CUDA allocator for " << ctx.device() << ": " << device_count_status());
}

#endif

}  // namespace dpe::cuda
