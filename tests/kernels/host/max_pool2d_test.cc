#include "kernels/host/max_pool2d.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

struct Case {
  int64_t n, c, h, w, kernel, stride, padding;
};

class MaxPool2dTest : public ::testing::TestWithParam<Case> {};

TEST_P(MaxPool2dTest, ForwardAndBackwardMatchReference) {
  const Case k = GetParam();
  const Pool2dShape s = max_pool2d_shape(k.n, k.c, k.h, k.w, k.kernel, k.stride, k.padding);
  HostContext ctx;
  const int64_t nx = s.n * s.c * s.h * s.w, ny = s.n * s.c * s.ho * s.wo;
  const auto x = random_floats(nx, 1), gy = random_floats(ny, 2);
  std::vector<double> want_y(ny), want_gx(nx, 0.0);
  std::vector<int64_t> want_i(ny);
  for (int64_t p = 0; p < s.n * s.c; ++p) {
    for (int64_t oh = 0; oh < s.ho; ++oh) {
      for (int64_t ow = 0; ow < s.wo; ++ow) {
        double best = -INFINITY;
        int64_t at = -1;
        for (int64_t a = 0; a < s.kernel; ++a) {
          for (int64_t e = 0; e < s.kernel; ++e) {
            const int64_t ih = oh * s.stride - s.padding + a, iw = ow * s.stride - s.padding + e;
            if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
            if (x[p * s.h * s.w + ih * s.w + iw] > best) {
              best = x[p * s.h * s.w + ih * s.w + iw];
              at = ih * s.w + iw;
            }
          }
        }
        const int64_t yi = (p * s.ho + oh) * s.wo + ow;
        want_y[yi] = best;
        want_i[yi] = at;
        want_gx[p * s.h * s.w + at] += gy[yi];
      }
    }
  }
  std::vector<float> y(ny), gx(nx, 5.0f);
  std::vector<int64_t> idx(ny);
  max_pool2d_forward(ctx, s, x.data(), y.data(), idx.data());
  expect_close(want_y, y, 0, 0, "max_pool2d y");
  EXPECT_EQ(idx, want_i);
  max_pool2d_backward(ctx, s, gy.data(), idx.data(), gx.data());
  expect_close(want_gx, gx, 1e-6, 1e-6, "max_pool2d gx");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPool2dTest,
                         ::testing::Values(Case{1, 1, 2, 2, 2, 2, 0},  // one window
                                           Case{2, 3, 7, 9, 2, 2, 0},  // odd sizes drop the edge
                                           Case{2, 2, 8, 8, 3, 2, 1},  // padding
                                           Case{1, 2, 6, 5, 3, 1, 1},  // overlapping windows
                                           Case{4, 16, 28, 28, 2, 2, 0}));  // the ConvNet's

TEST(MaxPool2dShapeTest, RejectsPaddingLargerThanHalfTheKernel) {
  EXPECT_THROW(max_pool2d_shape(1, 1, 4, 4, 2, 2, 2), Error);
}

TEST(MaxPool2dNanTest, NanWins) {
  HostContext ctx;
  const Pool2dShape s = max_pool2d_shape(1, 1, 2, 2, 2, 2, 0);
  const float x[4] = {1.0f, std::numeric_limits<float>::quiet_NaN(), 5.0f, 2.0f};
  float y;
  int64_t i;
  max_pool2d_forward(ctx, s, x, &y, &i);
  EXPECT_TRUE(std::isnan(y));
  EXPECT_EQ(i, 1);
}

}  // namespace
}  // namespace dpe::host
