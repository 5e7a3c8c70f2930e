// Allocator: the memory of one device, with the accounting DataParallel's imbalance report reads.
// Each device type derives one (engine/backend/host/host_allocator.h, the CUDA caching allocator)
// and supplies raw_allocate/raw_deallocate; this class counts and enforces the capacity.
//
// Threading contract: thread-safe; any worker may allocate or free on any device's allocator
// concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

#include "engine/device/device.h"
#include "engine/device/memory_stats.h"

namespace dpe {

class Allocator {
 public:
  Allocator(Device device, int64_t capacity_bytes);
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Returns memory for `bytes` (64-byte aligned on host), counted under `category`. Throws
  // dpe::Error naming the device, the bytes requested and the bytes free when the capacity would
  // be exceeded.
  void* allocate(size_t bytes, MemoryCategory category = current_memory_category());
  // `category` is the one the block is counted under now (its allocation's, or its last retag's).
  void deallocate(void* ptr, size_t bytes, MemoryCategory category = current_memory_category());
  // Moves `bytes` from one category's count to another's (the block itself stays where it is).
  void retag(size_t bytes, MemoryCategory from, MemoryCategory to);

  MemoryStats stats() const;
  // Starts a new peak window at the current usage.
  void reset_peak();
  Device device() const { return device_; }

 protected:
  virtual void* raw_allocate(size_t bytes) = 0;
  virtual void raw_deallocate(void* ptr, size_t bytes) = 0;

 private:
  // Accounts before raw_allocate, so the capacity check and the peak are exact.
  void reserve(int64_t bytes, MemoryCategory category);
  void release(int64_t bytes, MemoryCategory category);
  void note_category_peak(MemoryCategory category);  // with mu_ held

  const Device device_;
  const int64_t capacity_;
  // One lock for all counters: the breakdown at the peak is then an exact snapshot. Uncontended in
  // the common case (one worker per device), and cheaper than the allocation it accounts for.
  mutable std::mutex mu_;
  MemoryStats stats_;
};

}  // namespace dpe
