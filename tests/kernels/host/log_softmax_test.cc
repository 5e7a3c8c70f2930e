#include "kernels/host/log_softmax.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(LogSoftmaxTest, ForwardAndBackwardMatchReference) {
  HostContext ctx;
  struct Dims {
    int64_t rows, cols;
  };
  // The backward runs in blocks of rows: 32000 columns make blocks of 2 and a last one of 1;
  // 70000, rows wider than a block.
  for (Dims d : {Dims{1, 1}, Dims{3, 10}, Dims{17, 7}, Dims{4096, 10}, Dims{5, 32000},
                 Dims{3, 70000}}) {
    const int64_t n = d.rows * d.cols;
    auto x = random_floats(n, 1, -30.0f, 30.0f);  // wide range: needs the max shift
    x[0] = 80.0f;                                 // exp(80) overflows float without it
    const auto gy = random_floats(n, 2);
    std::vector<double> y(n), gx(n);
    for (int64_t r = 0; r < d.rows; ++r) {
      double mx = -INFINITY, sum = 0.0, gsum = 0.0;
      for (int64_t j = 0; j < d.cols; ++j) mx = std::max(mx, double(x[r * d.cols + j]));
      for (int64_t j = 0; j < d.cols; ++j) sum += std::exp(x[r * d.cols + j] - mx);
      for (int64_t j = 0; j < d.cols; ++j) {
        y[r * d.cols + j] = x[r * d.cols + j] - mx - std::log(sum);
        gsum += gy[r * d.cols + j];
      }
      for (int64_t j = 0; j < d.cols; ++j) {
        gx[r * d.cols + j] = gy[r * d.cols + j] - std::exp(y[r * d.cols + j]) * gsum;
      }
    }
    std::vector<float> got_y(n), got_gx(n);
    log_softmax_forward(ctx, x.data(), got_y.data(), d.rows, d.cols);
    expect_close(y, got_y, 1e-5, 1e-5, "log_softmax y");
    log_softmax_backward(ctx, got_y.data(), gy.data(), got_gx.data(), d.rows, d.cols);
    expect_close(gx, got_gx, 1e-5, 1e-5, "log_softmax gx");
  }
}

}  // namespace
}  // namespace dpe::host
