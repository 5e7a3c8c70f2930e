#include "kernels/host/gelu.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

// The tanh form in double, and its derivative by the chain rule.
double gelu_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}
double gelu_grad_ref(double x) {
  const double c = std::sqrt(2.0 / M_PI);
  const double t = std::tanh(c * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x);
}

TEST(GeluTest, ForwardAndBackwardMatchReference) {
  HostContext ctx;
  // Whole vectors, a partial one, and both with the OpenMP loop.
  for (int64_t n : {1, 7, 17, 100000, 100003}) {
    auto x = random_floats(n, 1, -6.0f, 6.0f);
    x[0] = -20.0f;  // far tails: tanh saturates, no NaN
    const auto gy = random_floats(n, 2);
    std::vector<double> y(n), gx(n);
    for (int64_t i = 0; i < n; ++i) {
      y[i] = gelu_ref(x[i]);
      gx[i] = gy[i] * gelu_grad_ref(x[i]);
    }
    std::vector<float> got_y(n), got_gx(n);
    gelu_forward(ctx, x.data(), got_y.data(), n);
    expect_close(y, got_y, 1e-5, 1e-6, "gelu y");
    gelu_backward(ctx, x.data(), gy.data(), got_gx.data(), n);
    expect_close(gx, got_gx, 1e-5, 1e-6, "gelu gx");
  }
}

// The far tails and special values, as torch's: 0 (and a zero gradient) far below, x (and 1) far
// above, a NaN stays NaN, +inf gives +inf.
TEST(GeluTest, TailsAndSpecialValues) {
  HostContext ctx;
  const std::vector<float> x = {-100.0f, -1e30f, 100.0f, 1e30f, std::nanf(""), INFINITY};
  const std::vector<float> gy(x.size(), 1.0f);
  std::vector<float> y(x.size()), gx(x.size());
  gelu_forward(ctx, x.data(), y.data(), static_cast<int64_t>(x.size()));
  gelu_backward(ctx, x.data(), gy.data(), gx.data(), static_cast<int64_t>(x.size()));
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(gx[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 100.0f);
  EXPECT_EQ(gx[2], 1.0f);
  EXPECT_EQ(y[3], 1e30f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(std::isnan(gx[4]));
  EXPECT_EQ(y[5], INFINITY);
}

}  // namespace
}  // namespace dpe::host
