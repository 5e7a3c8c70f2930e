#include "engine/backend/host/host_allocator.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "engine/core/error.h"

namespace dpe {

namespace {

// aligned_alloc needs a multiple of the alignment; cached blocks are rounded to 4 KiB pages (2 MiB
// ones from kHugeMinBytes on) so nearby sizes share a list. Zero-size tensors still get a unique,
// freeable pointer.
size_t rounded_size(size_t bytes) {
  if (bytes >= HostAllocator::kHugeMinBytes) {
    return (bytes + HostAllocator::kHugePage - 1) / HostAllocator::kHugePage *
           HostAllocator::kHugePage;
  }
  if (bytes >= HostAllocator::kCacheMinBytes) return ((bytes + 4095) / 4096) * 4096;
  const size_t r = ((bytes + 63) / 64) * 64;
  return r == 0 ? 64 : r;
}

// Blocks of kHugeMinBytes or more are whole 2 MiB pages from the kernel, asked to be transparent
// huge pages (where /sys/kernel/mm/transparent_hugepage/enabled is "madvise", as Debian ships it,
// nothing else makes them huge): a streaming kernel over a 12 MB activation then takes 6 TLB
// entries instead of 3,000, and the ConvNet's step at batch 256 ran 3-5% faster. The mapping is
// trimmed to a 2 MiB boundary so that every page of it can be huge. The rest comes from malloc.
// Under AddressSanitizer every block is malloc's, whose bounds it checks.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kMapHugeBlocks = false;
#else
constexpr bool kMapHugeBlocks = true;
#endif

// Decided on the rounded size, which the cache keeps as well.
bool mapped(size_t size) { return kMapHugeBlocks && size >= HostAllocator::kHugeMinBytes; }

void* system_allocate(size_t size) {
  if (!mapped(size)) return std::aligned_alloc(64, size);
  constexpr size_t page = HostAllocator::kHugePage;
  void* m = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (start + page - 1) / page * page;
  if (aligned > start) munmap(m, aligned - start);
  const size_t tail = start + size + page - (aligned + size);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + size), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, size, MADV_HUGEPAGE);  // a hint: without THP the pages stay 4 KiB
  return p;
}

void system_free(void* p, size_t size) {
  if (!mapped(size)) {
    std::free(p);
  } else {
    munmap(p, size);
  }
}

}  // namespace

HostAllocator::~HostAllocator() { release_cache(); }

void* HostAllocator::raw_allocate(size_t bytes) {
  const size_t size = rounded_size(bytes);
  if (bytes >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(mu_);
    held_ += size;
    most_held_ = std::max(most_held_, held_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_ -= size;
      return p;
    }
  }
  void* p = system_allocate(size);
  if (p == nullptr && cached_bytes() > 0) {
    release_cache();
    p = system_allocate(size);
  }
  if (p == nullptr) {
    if (bytes >= kCacheMinBytes) {
      std::lock_guard<std::mutex> lock(mu_);
      held_ -= size;
    }
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
    held_ -= size;
    if (cached_ + size <= std::max(cache_floor_, most_held_)) {
      free_[size].push_back(ptr);
      cached_ += size;
      return;
    }
  }
  system_free(ptr, size);
}

void HostAllocator::release_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) system_free(p, size);
  }
  free_.clear();
  cached_ = 0;
}

size_t HostAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

}  // namespace dpe
