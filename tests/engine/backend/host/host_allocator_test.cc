#include "engine/backend/host/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace dpe {
namespace {

TEST(HostAllocatorTest, AlignsTo64Bytes) {
  HostAllocator a(Device::parse("host:0"), 0);
  void* p = a.allocate(3);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  a.deallocate(p, 3);
}

TEST(HostAllocatorTest, LargeBlocksAreCachedAndReusedWithoutCountingAsHeld) {
  HostAllocator a(Device::parse("host:0"), 0);
  const size_t big = HostAllocator::kCacheMinBytes * 3 + 5;
  void* p = a.allocate(big);
  a.deallocate(p, big);
  EXPECT_EQ(a.stats().current_bytes, 0);  // cached, not held
  EXPECT_GE(a.cached_bytes(), big);
  void* q = a.allocate(big);  // the same block comes back
  EXPECT_EQ(q, p);
  EXPECT_EQ(a.cached_bytes(), 0u);
  EXPECT_EQ(a.stats().current_bytes, static_cast<int64_t>(big));
  a.deallocate(q, big);
  a.release_cache();
  EXPECT_EQ(a.cached_bytes(), 0u);
  void* small = a.allocate(100);  // small blocks go straight back to malloc
  a.deallocate(small, 100);
  EXPECT_EQ(a.cached_bytes(), 0u);
}

}  // namespace
}  // namespace dpe
