#include "kernels/host/log_softmax.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/core/error.h"
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
  for (Dims d :
       {Dims{1, 1}, Dims{3, 10}, Dims{17, 7}, Dims{4096, 10}, Dims{5, 32000}, Dims{3, 70000}}) {
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

// Cross-entropy against a double reference of log_softmax then nll_loss (mean over the rows that
// count) and of its gradient, (onehot - softmax) * -gout / count in the rows that count, 0 in the
// others. Shapes as above: one block, several, rows wider than a block, a shorter last block.
TEST(CrossEntropyTest, ForwardAndBackwardMatchReference) {
  HostContext ctx;
  struct Dims {
    int64_t rows, cols;
  };
  for (Dims d :
       {Dims{1, 1}, Dims{3, 10}, Dims{17, 7}, Dims{4096, 10}, Dims{5, 32000}, Dims{3, 70000}}) {
    SCOPED_TRACE(std::to_string(d.rows) + " x " + std::to_string(d.cols));
    const int64_t n = d.rows * d.cols, ignore = -100;
    auto x = random_floats(n, 3, -30.0f, 30.0f);
    x[0] = 80.0f;  // exp(80) overflows float without the max shift
    std::vector<int64_t> target(d.rows);
    for (int64_t r = 0; r < d.rows; ++r) target[r] = (r * 7 + 3) % d.cols;
    if (d.rows > 2) target[1] = ignore;
    const float gout = 1.7f;
    int64_t count = 0;
    double total = 0.0;
    std::vector<double> gx(n, 0.0);
    for (int64_t r = 0; r < d.rows; ++r) {
      double mx = -INFINITY, sum = 0.0;
      for (int64_t j = 0; j < d.cols; ++j) mx = std::max(mx, double(x[r * d.cols + j]));
      for (int64_t j = 0; j < d.cols; ++j) sum += std::exp(x[r * d.cols + j] - mx);
      const double lse = mx + std::log(sum);
      if (target[r] == ignore) continue;
      ++count;
      total += x[r * d.cols + target[r]] - lse;
      for (int64_t j = 0; j < d.cols; ++j) gx[r * d.cols + j] = std::exp(x[r * d.cols + j] - lse);
      gx[r * d.cols + target[r]] -= 1.0;
    }
    for (double& g : gx) g *= gout / count;
    float loss = 0.0f;
    std::vector<float> lse(d.rows), got_gx(n, 5.0f);
    cross_entropy_forward(ctx, x.data(), target.data(), &loss, lse.data(), d.rows, d.cols, ignore);
    EXPECT_NEAR(loss, -total / count, 1e-5 * std::max(1.0, std::abs(total / count)));
    cross_entropy_backward(ctx, x.data(), target.data(), lse.data(), &gout, got_gx.data(), d.rows,
                           d.cols, ignore);
    expect_close(gx, got_gx, 1e-5, 1e-5, "cross_entropy gx");
  }
}

// torch's edge cases: every target ignored gives a NaN loss and zero gradients; a target out of
// range is an error that names it, raised before the loss or the gradient is written.
TEST(CrossEntropyTest, AllIgnoredIsNaNAndABadTargetWritesNothing) {
  HostContext ctx;
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};
  std::vector<int64_t> target = {-100, -100};
  float loss = 0.0f, gout = 1.0f;
  std::vector<float> lse(2), gx(6, 5.0f);
  cross_entropy_forward(ctx, x.data(), target.data(), &loss, lse.data(), 2, 3, -100);
  EXPECT_TRUE(std::isnan(loss));
  cross_entropy_backward(ctx, x.data(), target.data(), lse.data(), &gout, gx.data(), 2, 3, -100);
  for (float g : gx) EXPECT_EQ(g, 0.0f);

  target = {0, 3};
  loss = 7.0f;
  std::fill(gx.begin(), gx.end(), 5.0f);
  try {
    cross_entropy_forward(ctx, x.data(), target.data(), &loss, lse.data(), 2, 3, -100);
    ADD_FAILURE() << "no error for target 3 of 3 classes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("target 3 is out of bounds for 3 classes"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(loss, 7.0f);
  EXPECT_THROW(cross_entropy_backward(ctx, x.data(), target.data(), lse.data(), &gout, gx.data(), 2,
                                      3, -100),
               Error);
  for (float g : gx) EXPECT_EQ(g, 5.0f);
}

// A NaN or +inf logit makes its row's log-softmax NaN, as torch's: the loss is NaN and that row's
// gradient NaN, the other rows' finite (oneDNN's exp alone would turn the NaN into a number).
TEST(CrossEntropyTest, ANaNOrInfinityMakesItsRowNaN) {
  HostContext ctx;
  for (float bad : {std::nanf(""), INFINITY}) {
    std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    x[4] = bad;
    const std::vector<int64_t> target = {0, 2, 1};
    float loss = 0.0f, gout = 1.0f;
    std::vector<float> lse(3), gx(9);
    cross_entropy_forward(ctx, x.data(), target.data(), &loss, lse.data(), 3, 3, -100);
    EXPECT_TRUE(std::isnan(loss)) << bad;
    cross_entropy_backward(ctx, x.data(), target.data(), lse.data(), &gout, gx.data(), 3, 3, -100);
    for (int j = 0; j < 3; ++j) {
      EXPECT_TRUE(std::isfinite(gx[j])) << bad << " " << j;
      EXPECT_TRUE(std::isnan(gx[3 + j])) << bad << " " << j;
      EXPECT_TRUE(std::isfinite(gx[6 + j])) << bad << " " << j;
    }
  }
}

// A NaN in a row of log_softmax's output (its input had one) makes that row's gradient NaN.
TEST(LogSoftmaxTest, ANaNRowHasANaNGradient) {
  HostContext ctx;
  const std::vector<float> x = {1, std::nanf(""), 3, 4, 5, 6};
  std::vector<float> y(6), gx(6);
  const std::vector<float> gy = {0.5f, -1, 0.25f, 1, 2, -3};
  log_softmax_forward(ctx, x.data(), y.data(), 2, 3);
  log_softmax_backward(ctx, y.data(), gy.data(), gx.data(), 2, 3);
  for (int j = 0; j < 3; ++j) {
    EXPECT_TRUE(std::isnan(gx[j])) << j;
    EXPECT_TRUE(std::isfinite(gx[3 + j])) << j;
  }
}

}  // namespace
}  // namespace dpe::host
