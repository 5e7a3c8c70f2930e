#include "kernels/host/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

class ElementwiseTest : public ::testing::TestWithParam<int64_t> {
 protected:
  HostContext ctx;
};

TEST_P(ElementwiseTest, MatchesReference) {
  const int64_t n = GetParam();
  const auto a = random_floats(n, 1), b = random_floats(n, 2);
  std::vector<float> out(n);
  std::vector<double> want(n);

  add_forward(ctx, a.data(), b.data(), -0.5f, out.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = double(a[i]) - 0.5 * b[i];
  expect_close(want, out, 1e-6, 1e-7, "add");

  mul_forward(ctx, a.data(), b.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = double(a[i]) * b[i];
  expect_close(want, out, 1e-6, 1e-7, "mul");

  scale_forward(ctx, a.data(), 3.0f, out.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = 3.0 * a[i];
  expect_close(want, out, 1e-6, 1e-7, "scale");

  relu_forward(ctx, a.data(), out.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? a[i] : 0.0;
  expect_close(want, out, 0, 0, "relu");

  std::vector<float> gx(n);
  relu_backward(ctx, out.data(), b.data(), gx.data(), n);
  for (int64_t i = 0; i < n; ++i) want[i] = a[i] > 0 ? b[i] : 0.0;
  expect_close(want, gx, 0, 0, "relu_backward");
}

// Odd sizes, and one past the parallel threshold.
INSTANTIATE_TEST_SUITE_P(Sizes, ElementwiseTest,
                         ::testing::Values(0, 1, 7, 1000, kParallelGrain + 3));

TEST(ElementwiseNanTest, ReluKeepsNanLikeTorch) {
  HostContext ctx;
  const float x[3] = {std::numeric_limits<float>::quiet_NaN(), -1.0f, 2.0f};
  float y[3];
  relu_forward(ctx, x, y, 3);
  EXPECT_TRUE(std::isnan(y[0]));
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 2.0f);
}

}  // namespace
}  // namespace dpe::host
