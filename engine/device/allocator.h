// Allocator: the memory of one device, with the accounting DataParallel's imbalance report reads.
// Each device type derives one (engine/backend/host/host_allocator.h, the CUDA caching allocator)
// and supplies raw_allocate/raw_deallocate; this class counts and enforces the capacity.
//
// Threading contract: thread-safe; any worker may allocate or free on any device's allocator
// concurrently.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

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

}  // namespace dpe
