// The binaries' malloc is TCMalloc (bazel/third_party/tcmalloc.BUILD) unless the build turned it
// off (--//bazel:tcmalloc=false, as the sanitizer configs do). The link could silently lose it
// (a linker that drops unreferenced libraries), so this checks what the process resolved.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/device/runtime.h"
#include "engine/tensor/tensor.h"

namespace dpe {
namespace {

// The process's resident set, from /proc/self/status.
int64_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "... kB"
  }
  return -1;
}

TEST(Malloc, IsTcmallocUnlessTurnedOff) {
#if DPE_EXPECT_TCMALLOC
  void* tc_malloc = dlsym(RTLD_DEFAULT, "tc_malloc");
  ASSERT_NE(tc_malloc, nullptr) << "libtcmalloc_minimal is not loaded: the link dropped it";
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "malloc"), tc_malloc) << "malloc resolves to another library's";
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "free"), dlsym(RTLD_DEFAULT, "tc_free"));
  // operator new goes through it as well: a block from new is one TCMalloc knows the size of.
  auto* tc_malloc_size =
      reinterpret_cast<size_t (*)(void*)>(dlsym(RTLD_DEFAULT, "tc_malloc_size"));
  ASSERT_NE(tc_malloc_size, nullptr);
  auto block = std::make_unique<char[]>(1000);
  EXPECT_GE(tc_malloc_size(block.get()), 1000u);
#else
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "tc_malloc"), nullptr) << "linked although turned off";
#endif
}

// TCMalloc keeps freed pages until told, and malloc_trim does not reach it: Runtime::empty_cache,
// which callers use to hand memory back before starting memory-hungry children, must tell it.
TEST(Malloc, EmptyCacheReturnsFreedPagesToTheSystem) {
  if (dlsym(RTLD_DEFAULT, "tc_malloc") == nullptr) GTEST_SKIP() << "not TCMalloc";
  constexpr int64_t kBlocks = 32, kBlockFloats = int64_t{2} << 20;  // 32 x 8 MiB
  const Device d = Device::parse("host:0");
  {
    std::vector<Tensor> blocks;
    for (int64_t i = 0; i < kBlocks; ++i) blocks.push_back(Tensor::ones({kBlockFloats}, d));
  }
  const int64_t held = resident_bytes();
  Runtime::get().empty_cache();
  const int64_t after = resident_bytes();
  EXPECT_LT(after, held - (int64_t{128} << 20))
      << "resident " << (held >> 20) << " MiB before empty_cache, " << (after >> 20) << " after";
}

}  // namespace
}  // namespace dpe
