#include "kernels/host/dropout.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

#include "engine/core/error.h"
#include "kernels/host/elementwise.h"

namespace dpe::host {
namespace {

TEST(DropoutTest, MaskHoldsZeroOrTheScaleAtRateP) {
  HostContext ctx;
  const int64_t n = 200000;
  std::vector<float> mask(n);
  for (float p : {0.0f, 0.25f, 0.5f, 0.9f}) {
    dropout_mask(ctx, p, 42, mask.data(), n);
    int64_t zeros = 0;
    for (float m : mask) {
      if (m == 0.0f) {
        ++zeros;
      } else {
        EXPECT_FLOAT_EQ(m, 1.0f / (1.0f - p));
      }
    }
    // Binomial(n, p): 5 standard deviations.
    const double sd = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(zeros, n * p, 5 * sd + 1) << "p=" << p;
  }
  dropout_mask(ctx, 1.0f, 42, mask.data(), n);
  for (float m : mask) EXPECT_EQ(m, 0.0f);
  EXPECT_THROW(dropout_mask(ctx, 1.5f, 42, mask.data(), n), Error);
}

TEST(DropoutTest, MaskDependsOnSeedOnlyNotOnThreads) {
  HostContext ctx;
  const int64_t n = kParallelGrain * 2 + 1;
  std::vector<float> a(n), b(n), c(n);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dropout_mask(ctx, 0.3f, 7, a.data(), n);
  omp_set_num_threads(2);
  dropout_mask(ctx, 0.3f, 7, b.data(), n);
  omp_set_num_threads(threads);
  EXPECT_EQ(a, b);
  dropout_mask(ctx, 0.3f, 8, c.data(), n);
  EXPECT_NE(a, c);
}

}  // namespace
}  // namespace dpe::host
