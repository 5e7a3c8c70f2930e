// The binaries' malloc is TCMalloc (bazel/third_party/tcmalloc.BUILD) unless the build turned it
// off (--//bazel:tcmalloc=false, as the sanitizer configs do). The link could silently lose it
// (a linker that drops unreferenced libraries), so this checks what the process resolved.
#include <dlfcn.h>

#include <cstdlib>
#include <memory>

#include <gtest/gtest.h>

namespace {

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
  GTEST_SKIP() << "built with --//bazel:tcmalloc=false: glibc's (or a sanitizer's) malloc";
#endif
}

}  // namespace
