// Allocator: the memory of one device, with the accounting DataParallel's imbalance report reads.
// Thread-safe: any worker may allocate or free on any device's allocator concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/device/device.h"
#include "engine/device/memory_stats.h"

namespace dpe {

class Allocator {
 public:
  Allocator(Device device, int64_t capacity_bytes);
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns memory for `bytes` (64-byte aligned on host). Throws dpe::Error naming the device,
  // the bytes requested and the bytes free when the capacity would be exceeded.
  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes);

  MemoryStats stats() const;
  // Starts a new peak window at the current usage.
  void reset_peak();
  Device device() const { return device_; }

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;

 private:
  void reserve(int64_t bytes);  // accounts first, so the capacity check and the peak are exact
  void release(int64_t bytes);

  const Device device_;
  const int64_t capacity_;
  std::atomic<int64_t> current_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
};

// Host memory: aligned malloc, with a cache of large blocks. A training step allocates the same
// large activations every step; returning them to glibc unmaps them and the next step pays the
// page faults again, so blocks of kCacheMinBytes or more are kept, keyed by their rounded size,
// and reused. The statistics above count bytes held by tensors, not bytes cached.
class HostAllocator final : public Allocator {
 public:
  static constexpr size_t kCacheMinBytes = size_t{1} << 16;
  static constexpr size_t kCacheMaxBytes = size_t{1} << 30;  // per device

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
