#include "engine/device/allocator.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace dpe {

Allocator::Allocator(Device device, int64_t capacity_bytes)
    : device_(device), capacity_(capacity_bytes) {}

void Allocator::reserve(int64_t bytes) {
  const int64_t now = current_.fetch_add(bytes) + bytes;
  if (capacity_ > 0 && now > capacity_) {
    current_.fetch_sub(bytes);
    DPE_THROW("out of memory on " << device_ << ": tried to allocate " << bytes << " bytes ("
                                  << format_bytes(bytes) << ") with " << (capacity_ - (now - bytes))
                                  << " bytes free of a capacity of " << capacity_ << " bytes ("
                                  << format_bytes(capacity_) << ")");
  }
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void Allocator::release(int64_t bytes) { current_.fetch_sub(bytes); }

void* Allocator::allocate(size_t bytes) {
  reserve(static_cast<int64_t>(bytes));
  void* p = nullptr;
  try {
    p = raw_allocate(bytes);
  } catch (...) {
    release(static_cast<int64_t>(bytes));
    throw;
  }
  allocations_.fetch_add(1);
  return p;
}

void Allocator::deallocate(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  raw_deallocate(ptr, bytes);
  release(static_cast<int64_t>(bytes));
}

MemoryStats Allocator::stats() const {
  MemoryStats s;
  s.current_bytes = current_.load();
  s.peak_bytes = peak_.load();
  s.allocations = allocations_.load();
  s.capacity_bytes = capacity_;
  return s;
}

void Allocator::reset_peak() { peak_.store(current_.load()); }

namespace {

// aligned_alloc needs a multiple of the alignment; cached blocks are rounded to 4 KiB pages so
// nearby sizes share a list. Zero-size tensors still get a unique, freeable pointer.
size_t rounded_size(size_t bytes) {
  if (bytes >= HostAllocator::kCacheMinBytes) return ((bytes + 4095) / 4096) * 4096;
  const size_t r = ((bytes + 63) / 64) * 64;
  return r == 0 ? 64 : r;
}

}  // namespace

HostAllocator::~HostAllocator() { release_cache(); }

void* HostAllocator::raw_allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  if (bytes >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(64, size);
  if (p == nullptr && cached_bytes() > 0) {
    release_cache();
    p = std::aligned_alloc(64, size);
  }
  DPE_CHECK(p != nullptr, "out of memory on " << device() << ": the system refused "
                                              << bytes << " bytes");
  return p;
}

void HostAllocator::raw_deallocate(void* ptr, size_t bytes) {
  const size_t size = rounded_size(bytes);
  if (bytes >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cached_ + size <= kCacheMaxBytes) {
      free_[size].push_back(ptr);
      cached_ += size;
      return;
    }
  }
  std::free(ptr);
}

void HostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) std::free(p);
  }
  free_.clear();
  cached_ = 0;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace dpe
