#include "engine/backend/host/host_allocator.h"

#include <cstdlib>

#include "engine/core/error.h"

namespace dpe {

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
  if (p == nullptr) {
    detail::MessageBuilder mb;
    mb << "out of memory on " << device() << ": the system refused " << bytes << " bytes";
    throw OutOfMemoryError(mb.str());
  }
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
