#include "kernels/host/host_context.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <memory>

namespace dpe::host {
namespace {

struct Counter : HostContext::CacheEntry {
  int value = 0;
};

TEST(HostContextTest, CacheBuildsAnEntryOncePerKeyAndThreadCount) {
  HostContext ctx;
  int made = 0;
  auto make = [&] {
    ++made;
    return std::make_unique<Counter>();
  };
  Counter& a = ctx.cached<Counter>(CacheKey(1, {2, 3}), make);
  a.value = 7;
  EXPECT_EQ(ctx.cached<Counter>(CacheKey(1, {2, 3}), make).value, 7);
  EXPECT_EQ(made, 1);
  ctx.cached<Counter>(CacheKey(1, {3, 2}), make);     // other sizes
  ctx.cached<Counter>(CacheKey(2, {2, 3}), make);     // other kernel
  ctx.cached<Counter>(CacheKey(1, {2, 3, 0}), make);  // other arity
  EXPECT_EQ(made, 4);
  // Primitives depend on the thread count they were built for.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(threads + 1);
  EXPECT_EQ(ctx.cached<Counter>(CacheKey(1, {2, 3}), make).value, 0);
  omp_set_num_threads(threads);
  EXPECT_EQ(ctx.cached<Counter>(CacheKey(1, {2, 3}), make).value, 7);
  EXPECT_EQ(made, 5);
  EXPECT_EQ(ctx.cache_size(), 5u);
}

}  // namespace
}  // namespace dpe::host
