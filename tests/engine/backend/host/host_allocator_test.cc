#include "engine/backend/host/host_allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// The cache keeps what the device held at its most, past its floor (a step's activations, freed,
// are all there for the next step), and no more.
TEST(HostAllocatorTest, TheCacheHoldsUpToTheMostEverHeld) {
  const size_t block = HostAllocator::kCacheMinBytes * 4;  // rounds to itself (whole pages)
  HostAllocator a(Device::parse("host:0"), 0, /*cache_floor=*/block);
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(a.allocate(block));
  for (void* q : held) a.deallocate(q, block);
  EXPECT_EQ(a.cached_bytes(), 4 * block);       // four times the floor: the most held
  for (void*& q : held) q = a.allocate(block);  // all four come back from the cache
  EXPECT_EQ(a.cached_bytes(), 0u);
  for (void* q : held) a.deallocate(q, block);
  // A block of another size, with nothing else held: the cache is already at the most held.
  void* other = a.allocate(2 * block);
  a.deallocate(other, 2 * block);
  EXPECT_EQ(a.cached_bytes(), 4 * block);
  a.release_cache();
  EXPECT_EQ(a.cached_bytes(), 0u);
}

// /proc/self/smaps' THPeligible of the mapping that holds p ("" if none is found).
std::string thp_eligible(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= at && at < hi;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return line.substr(std::strlen("THPeligible:"));
    }
  }
  return "";
}

TEST(HostAllocatorTest, LargeBlocksAreWholeHugePagesAskedToBeTransparentHugePages) {
  HostAllocator a(Device::parse("host:0"), 0);
  const size_t big = HostAllocator::kHugeMinBytes * 3 + 5;
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under AddressSanitizer large blocks are malloc's";
#endif
  char* p = static_cast<char*>(a.allocate(big));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HostAllocator::kHugePage, 0u);
  std::memset(p, 1, big);  // all of it is writable
  std::ifstream enabled("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(enabled, modes);
  if (!modes.empty() && modes.find("[never]") == std::string::npos) {
    EXPECT_NE(thp_eligible(p).find('1'), std::string::npos) << "THP modes: " << modes;
  }
  a.deallocate(p, big);
  void* q = a.allocate(big);  // cached like any large block
  EXPECT_EQ(q, p);
  a.deallocate(q, big);
  a.release_cache();  // unmapped
  EXPECT_EQ(a.cached_bytes(), 0u);
  EXPECT_EQ(thp_eligible(p), "");
  // Just under the threshold a block still rounds to 2 MiB: mapped, and unmapped, alike.
  const size_t under = HostAllocator::kHugeMinBytes - 100;
  void* u = a.allocate(under);
  std::memset(u, 1, under);
  a.deallocate(u, under);
  a.release_cache();
}

}  // namespace
}  // namespace dpe
