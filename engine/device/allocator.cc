#include "engine/device/allocator.h"

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

}  // namespace dpe
