#include "kernels/host/gelu.h"

#include <gtest/gtest.h>

#include <cmath>

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
  for (int64_t n : {1, 7, 100000}) {  // the last runs the OpenMP loop
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

}  // namespace
}  // namespace dpe::host
