// HostAllocator: the memory of a host device (64-byte aligned malloc with a cache of large blocks).
//
// Threading contract: thread-safe, as every Allocator.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/device/allocator.h"

namespace dpe {

// Host memory: aligned malloc, with a cache of large blocks. A training step allocates the same
// large activations every step; returning them to glibc unmaps them and the next step pays the
// page faults again, so blocks of kCacheMinBytes or more are kept, keyed by their rounded size,
// and reused. The cache keeps up to the most the device has ever held in such blocks at once,
// and at least `cache_floor` bytes: what one step frees, the next finds, whatever the model's
// size (ResNet-50 at batch 8 holds 2 GiB at its peak; with the cache capped at 1 GiB, its step
// mapped and zeroed freed blocks again and took 3-30% longer). Allocator's statistics count bytes
// held by tensors, not bytes cached.
class HostAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMinBytes = size_t{1} << 16;
  static constexpr size_t kCacheFloorBytes = size_t{1} << 30;  // per device
  // Blocks of kHugeMinBytes or more are mapped whole kHugePage pages, transparent huge pages
  // where the kernel has them (host_allocator.cc).
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeMinBytes = kHugePage;

  HostAllocator(Device device, int64_t capacity_bytes, size_t cache_floor = kCacheFloorBytes)
      : Allocator(device, capacity_bytes), cache_floor_(cache_floor) {}
  ~HostAllocator() override;
  // Frees every cached block.
  void release_cache();
  size_t cached_bytes() const;

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* ptr, size_t bytes) override;

 private:
  const size_t cache_floor_;
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> blocks
  size_t cached_ = 0;
  size_t held_ = 0, most_held_ = 0;  // bytes of cacheable blocks handed out: now, and at most
};

}  // namespace dpe
