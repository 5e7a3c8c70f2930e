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
// and reused. Allocator's statistics count bytes held by tensors, not bytes cached.
class HostAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMinBytes = size_t{1} << 16;
  static constexpr size_t kCacheMaxBytes = size_t{1} << 30;  // per device
  // Blocks of kHugeMinBytes or more are mapped whole kHugePage pages, transparent huge pages
  // where the kernel has them (host_allocator.cc).
  static constexpr size_t kHugePage = size_t{2} << 20;
  static constexpr size_t kHugeMinBytes = kHugePage;

  using Allocator::Allocator;
  ~HostAllocator() override;
  // Frees every cached block.
  void release_cache();
  size_t cached_bytes() const;

 protected:
  void* raw_allocate(size_t bytes) override;
  void raw_deallocate(void* ptr, size_t bytes) override;

 private:
  mutable std::mutex mu_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // rounded size -> blocks
  size_t cached_ = 0;
};

}  // namespace dpe
