#include "kernels/host/max_pool2d.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "engine/core/error.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_nhwc;

struct Case {
  int64_t n, c, h, w, kernel, stride, padding;
};

class MaxPool2dTest : public ::testing::TestWithParam<Case> {};

std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

// Pooling into window codes (op_params.h) gives the same outputs, each output's code names the
// place of its index inside its window, and the backward from the codes gives the gradient the
// indices give, bit for bit.
void expect_codes_name_indices(HostContext& ctx, const Pool2dShape& s, const std::vector<float>& x,
                               const std::vector<int64_t>& idx, const std::vector<float>& gy) {
  const int64_t ny = static_cast<int64_t>(idx.size()), nx = s.n * s.c * s.h * s.w;
  std::vector<float> y(ny), y_codes(ny);
  std::vector<int64_t> unused(ny);
  std::vector<uint8_t> codes(ny);
  max_pool2d_forward(ctx, s, x.data(), y.data(), unused.data());
  max_pool2d_forward(ctx, s, x.data(), y_codes.data(), codes.data());
  EXPECT_EQ(bits(y_codes), bits(y));
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t ch = 0; ch < s.c; ++ch) {
      for (int64_t oh = 0; oh < s.ho; ++oh) {
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t o = s.channels_last ? ((n * s.ho + oh) * s.wo + ow) * s.c + ch
                                            : ((n * s.c + ch) * s.ho + oh) * s.wo + ow;
          const int64_t ih = idx[o] / s.w, iw = idx[o] % s.w;
          const int64_t dh = ih - (oh * s.stride - s.padding),
                        dw = iw - (ow * s.stride - s.padding);
          ASSERT_EQ(codes[o], dh * s.kernel + dw) << "output " << o;
        }
      }
    }
  }
  std::vector<float> from_idx(nx, 5.0f), from_codes(nx, 5.0f);
  max_pool2d_backward(ctx, s, gy.data(), idx.data(), from_idx.data());
  max_pool2d_backward(ctx, s, gy.data(), codes.data(), from_codes.data());
  EXPECT_EQ(bits(from_codes), bits(from_idx));
}

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
  expect_codes_name_indices(ctx, s, x, idx, gy);

  // Channels last: the same values and indices (h * w + w within a plane), laid out NHWC.
  Pool2dShape cl = s;
  cl.channels_last = true;
  const auto x_cl = to_nhwc(x, s.n, s.c, s.h, s.w), gy_cl = to_nhwc(gy, s.n, s.c, s.ho, s.wo);
  max_pool2d_forward(ctx, cl, x_cl.data(), y.data(), idx.data());
  expect_close(to_nhwc(want_y, s.n, s.c, s.ho, s.wo), y, 0, 0, "max_pool2d y, channels last");
  EXPECT_EQ(idx, to_nhwc(want_i, s.n, s.c, s.ho, s.wo));
  max_pool2d_backward(ctx, cl, gy_cl.data(), idx.data(), gx.data());
  expect_close(to_nhwc(want_gx, s.n, s.c, s.h, s.w), gx, 1e-6, 1e-6, "max_pool2d gx, cl");
  expect_codes_name_indices(ctx, cl, x_cl, idx, gy_cl);
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPool2dTest,
                         ::testing::Values(Case{1, 1, 2, 2, 2, 2, 0},     // one window
                                           Case{2, 3, 7, 9, 2, 2, 0},     // odd sizes drop the edge
                                           Case{2, 2, 8, 8, 3, 2, 1},     // padding
                                           Case{1, 2, 6, 5, 3, 1, 1},     // overlapping windows
                                           Case{4, 16, 28, 28, 2, 2, 0},  // the ConvNet's
                                           Case{2, 3, 5, 71, 2, 2, 0},    // 35 wide: 16 + 16 + 3
                                           Case{2, 2, 6, 25, 2, 2, 0},    // 12 wide, odd width
                                           Case{3, 2, 14, 14, 2, 2, 0},   // 7 wide: two rows a step
                                           Case{1, 2, 4, 17, 2, 2, 0},    // 8 wide: all 16 lanes
                                           // channels last, 3x3 windows: a partial vector of
                                           // channels, whole ones, and whole ones and a tail
                                           Case{2, 8, 14, 14, 3, 2, 1}, Case{1, 32, 6, 7, 3, 2, 1},
                                           Case{2, 20, 9, 9, 3, 2, 1}, Case{1, 35, 5, 5, 3, 1, 1},
                                           // eight channels, two windows a vector: an even
                                           // row of windows, stride 1, one window, and windows
                                           // wider than the plane
                                           Case{1, 8, 8, 8, 3, 2, 1}, Case{2, 8, 5, 6, 3, 1, 1},
                                           Case{1, 8, 3, 3, 3, 1, 0}, Case{1, 8, 5, 2, 4, 2, 2},
                                           // windows as wide as the plane, and wider (padded)
                                           Case{2, 3, 4, 3, 3, 1, 1}, Case{1, 17, 5, 2, 2, 1, 1},
                                           Case{2, 3, 4, 2, 3, 1, 1}, Case{1, 5, 3, 2, 4, 2, 2},
                                           // the widest window with codes: up to 255
                                           Case{1, 3, 20, 18, 16, 2, 0},
                                           // NCHW planes in blocks of 16 (a partial last one),
                                           // more blocks than threads
                                           Case{9, 37, 14, 14, 3, 2, 1}));

// A window code is a byte: kernels up to 16 (op_params.h), forward and backward.
TEST(MaxPool2dCodesTest, RejectsKernelsWiderThanSixteen) {
  HostContext ctx;
  const Pool2dShape s = max_pool2d_shape(1, 1, 17, 17, 17, 1, 0);
  std::vector<float> x(17 * 17), y(1), gx(17 * 17);
  std::vector<uint8_t> codes(1);
  EXPECT_THROW(max_pool2d_forward(ctx, s, x.data(), y.data(), codes.data()), Error);
  EXPECT_THROW(max_pool2d_backward(ctx, s, y.data(), codes.data(), gx.data()), Error);
}

// The widest window's last place is the largest code, 255: an increasing plane puts its maximum
// there, in both layouts, and the backward sends the gradient back to it.
TEST(MaxPool2dCodesTest, TheWidestWindowsLastPlaceIsCode255) {
  HostContext ctx;
  for (const bool channels_last : {false, true}) {
    Pool2dShape s = max_pool2d_shape(1, 1, 16, 16, 16, 1, 0);
    s.channels_last = channels_last;
    std::vector<float> x(256), y(1), gy{2.5f}, gx(256, 7.0f);
    for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i);
    std::vector<uint8_t> codes(1);
    max_pool2d_forward(ctx, s, x.data(), y.data(), codes.data());
    EXPECT_EQ(y[0], 255.0f);
    EXPECT_EQ(codes[0], 255);
    max_pool2d_backward(ctx, s, gy.data(), codes.data(), gx.data());
    std::vector<float> want(256, 0.0f);
    want[255] = 2.5f;
    EXPECT_EQ(gx, want) << (channels_last ? "channels last" : "NCHW");
  }
}

// The backward's values are the scatter-add's onto zeros, bit for bit: a -0 gradient lands as +0
// (0 + -0), a NaN as NaN, the other three elements +0 (the fused batch norm + ReLU + pooling
// backward relies on it to match the ops apart).
TEST(MaxPool2dBackwardTest, MinusZeroLandsAsPlusZeroAndNaNAsNaN) {
  HostContext ctx;
  const Pool2dShape s = max_pool2d_shape(1, 1, 2, 20, 2, 2, 0);  // 10 windows: 8 + a tail of 2
  std::vector<float> gy(10, -0.0f);
  gy[3] = std::numeric_limits<float>::quiet_NaN();
  gy[9] = std::numeric_limits<float>::quiet_NaN();
  std::vector<int64_t> idx(10);
  for (int64_t k = 0; k < 10; ++k) idx[k] = (k % 2 == 0 ? 20 : 0) + 2 * k + (k % 3 == 0 ? 1 : 0);
  std::vector<float> gx(40, 7.0f);
  max_pool2d_backward(ctx, s, gy.data(), idx.data(), gx.data());
  for (int64_t i = 0; i < 40; ++i) {
    const int64_t window = (i % 20) / 2;
    if (i == idx[window] && std::isnan(gy[window])) {
      EXPECT_TRUE(std::isnan(gx[i])) << i;
    } else {
      EXPECT_EQ(gx[i], 0.0f) << i;
      EXPECT_FALSE(std::signbit(gx[i])) << i;
    }
  }
}

// Every 2x2 row layout the fast kernels take apart: widths whose rows have full steps of 8 (16)
// windows and tails of every length, computed in place or through the stack, with values on a
// coarse grid (ties in most windows) and NaNs sprinkled in: each output is the window's first
// maximum, or its last NaN, as take() defines them.
TEST(MaxPool2dNanTest, EveryRowLayoutKeepsTheTieAndNaNRules) {
  HostContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int64_t h : {2, 3, 5}) {
    for (int64_t w = 2; w <= 41; ++w) {
      SCOPED_TRACE(::testing::Message() << "h " << h << ", w " << w);
      const Pool2dShape s = max_pool2d_shape(2, 2, h, w, 2, 2, 0);
      const int64_t plane = h * w, n = 4 * plane, out_plane = s.ho * s.wo;
      auto x = random_floats(n, static_cast<uint32_t>(100 + h * 50 + w), -2.0f, 2.0f);
      for (int64_t i = 0; i < n; ++i) x[i] = i % 13 == 5 ? nan : std::round(x[i]);
      std::vector<float> y(4 * out_plane);
      std::vector<int64_t> idx(4 * out_plane);
      max_pool2d_forward(ctx, s, x.data(), y.data(), idx.data());
      for (int64_t p = 0; p < 4; ++p) {
        for (int64_t oh = 0; oh < s.ho; ++oh) {
          for (int64_t ow = 0; ow < s.wo; ++ow) {
            float best = -INFINITY;
            int64_t at = 2 * oh * w + 2 * ow;
            for (int64_t a = 0; a < 2; ++a) {
              for (int64_t e = 0; e < 2; ++e) {
                const int64_t pos = (2 * oh + a) * w + 2 * ow + e;
                const float v = x[p * plane + pos];
                if (v > best || std::isnan(v)) {
                  best = v;
                  at = pos;
                }
              }
            }
            const int64_t o = p * out_plane + oh * s.wo + ow;
            ASSERT_EQ(idx[o], at) << "plane " << p << ", output " << oh << ", " << ow;
            ASSERT_TRUE(std::isnan(best) ? std::isnan(y[o]) : y[o] == best) << o;
          }
        }
      }
    }
  }
}

TEST(MaxPool2dShapeTest, RejectsPaddingLargerThanHalfTheKernel) {
  EXPECT_THROW(max_pool2d_shape(1, 1, 4, 4, 2, 2, 2), Error);
}

// A window wider than the padded input has no output (torch: "Output size is too small"), though
// (1 - 2) / 2 + 1 is 1 in C++'s division.
TEST(MaxPool2dShapeTest, RejectsAWindowWiderThanThePaddedInput) {
  try {
    max_pool2d_shape(1, 1, 1, 4, 2, 2, 0);
    FAIL() << "expected dpe::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "max_pool2d: output size is too small for input 1x4 (kernel 2, padding 0)");
  }
  EXPECT_THROW(max_pool2d_shape(1, 1, 4, 2, 3, 2, 0), Error);
  EXPECT_NO_THROW(max_pool2d_shape(1, 1, 1, 1, 3, 2, 1));  // padded to 3x3
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

// PyTorch 1.13's choices where values tie or are NaN (printed by torch.nn.functional.max_pool2d
// with return_indices=True): the first of equal maxima, the last of several NaNs. Each window is
// one output of the vectorised 2x2 path.
TEST(MaxPool2dNanTest, TiesTakeTheFirstMaximumAndNaNsTheLast) {
  HostContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Four 2x2 windows side by side in one 2x8 plane: all zero, two NaNs, NaNs at both ends, a
  // tie of 3s with a smaller value between.
  const float x[16] = {0, 0, 1,   nan, nan, 1,   3, 3,  //
                       0, 0, nan, 2,   2,   nan, 1, 3};
  const Pool2dShape s = max_pool2d_shape(1, 1, 2, 8, 2, 2, 0);
  float y[4];
  int64_t i[4];
  max_pool2d_forward(ctx, s, x, y, i);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(i[0], 0);  // [0, 0, 0, 0] -> 0
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(i[1], 10);  // [1, nan, nan, 2] -> the second NaN (window position 2)
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(i[2], 13);  // [nan, 1, 2, nan] -> the last NaN (window position 3)
  EXPECT_EQ(y[3], 3.0f);
  EXPECT_EQ(i[3], 6);  // [3, 3, 1, 3] -> the first 3
  // One channel's NHWC is its NCHW: channels last chooses alike.
  Pool2dShape cl = s;
  cl.channels_last = true;
  float y_cl[4];
  int64_t i_cl[4];
  max_pool2d_forward(ctx, cl, x, y_cl, i_cl);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(i_cl[k], i[k]) << k;
    EXPECT_TRUE(y_cl[k] == y[k] || (std::isnan(y_cl[k]) && std::isnan(y[k]))) << k;
  }
}

// Two row pairs share one vector where rows are narrow: NaNs in the second pair follow the same
// rule.
TEST(MaxPool2dNanTest, NaNsInTheSecondRowPairOfAStep) {
  HostContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float x[16] = {1,   2, 3, 4,    //
                       5,   6, 7, 8,    //
                       nan, 1, 2, nan,  //
                       0,   0, 9, 1};
  const Pool2dShape s = max_pool2d_shape(1, 1, 4, 4, 2, 2, 0);
  float y[4];
  int64_t i[4];
  max_pool2d_forward(ctx, s, x, y, i);
  EXPECT_EQ(y[0], 6.0f);
  EXPECT_EQ(i[0], 5);
  EXPECT_EQ(y[1], 8.0f);
  EXPECT_EQ(i[1], 7);
  EXPECT_TRUE(std::isnan(y[2]));
  EXPECT_EQ(i[2], 8);  // [nan, 1, 0, 0] -> the NaN
  EXPECT_TRUE(std::isnan(y[3]));
  EXPECT_EQ(i[3], 11);  // [2, nan, 9, 1] -> the NaN: 9 does not replace it
}

TEST(MaxPool2dTest, TiesAfterAReluGoToTheFirstMaximum) {
  // Half the inputs 0, as after a ReLU: many ties, where the two paths could disagree.
  HostContext ctx;
  const Pool2dShape fast = max_pool2d_shape(3, 4, 14, 14, 2, 2, 0);
  const int64_t nx = fast.n * fast.c * fast.h * fast.w, ny = fast.n * fast.c * fast.ho * fast.wo;
  auto x = random_floats(nx, 7);
  for (float& v : x) v = v > 0 ? v : 0.0f;
  std::vector<float> y(ny), y_ref(ny);
  std::vector<int64_t> i(ny), i_ref(ny, -1);
  max_pool2d_forward(ctx, fast, x.data(), y.data(), i.data());
  for (int64_t p = 0; p < fast.n * fast.c; ++p) {
    for (int64_t k = 0; k < fast.ho * fast.wo; ++k) {
      const int64_t oh = k / fast.wo, ow = k % fast.wo;
      float best = -INFINITY;
      for (int64_t a = 0; a < 2; ++a) {
        for (int64_t e = 0; e < 2; ++e) {
          const int64_t at = (2 * oh + a) * fast.w + 2 * ow + e;
          if (x[p * fast.h * fast.w + at] > best) {
            best = x[p * fast.h * fast.w + at];
            i_ref[p * fast.ho * fast.wo + k] = at;
          }
        }
      }
      y_ref[p * fast.ho * fast.wo + k] = best;
    }
  }
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(i, i_ref);
}

// The channels-last kernels (the 2x2 ones, and the general one for other windows; 16 or 8
// channels a vector, the rest one at a time or as a partial vector) choose and scatter as the NCHW
// kernels do, bit for bit: ties and NaNs in the windows, -0 and NaN gradients, and odd sizes whose
// last row and column no window covers (their gradient 0, not what gx held). Each plane's top-left
// corner is -inf (the first two windows of a row, stride 2): windows with nothing larger keep
// their first element.
TEST(MaxPool2dNanTest, ChannelsLastChoosesAndScattersAsNchw) {
  HostContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const int64_t n = 2, h = 5, w = 7;
  for (const std::array<int64_t, 4>& window : {std::array<int64_t, 4>{2, 2, 0, 19},
                                               {3, 2, 1, 19},
                                               {3, 1, 1, 19},
                                               {2, 1, 0, 19},
                                               {3, 2, 1, 8},
                                               {3, 1, 1, 8}}) {
    const int64_t c = window[3];
    SCOPED_TRACE(::testing::Message() << "kernel " << window[0] << " stride " << window[1]
                                      << " padding " << window[2] << ", " << c << " channels");
    const Pool2dShape s = max_pool2d_shape(n, c, h, w, window[0], window[1], window[2]);
    const int64_t nx = n * c * h * w, ny = n * c * s.ho * s.wo;
    std::vector<float> x(nx), gy(ny);
    for (int64_t k = 0; k < nx; ++k) {
      const bool corner = k / w % h <= 1 && k % w <= 3;
      x[k] = k % 11 == 0 ? nan : (corner ? -INFINITY : static_cast<float>((k * 7) % 3));
    }
    for (int64_t k = 0; k < ny; ++k) {
      gy[k] = k % 3 == 0 ? -0.0f : (k % 7 == 0 ? nan : static_cast<float>(k % 5) - 2.0f);
    }
    std::vector<float> y(ny), gx(nx, 5.0f);
    std::vector<int64_t> idx(ny);
    max_pool2d_forward(ctx, s, x.data(), y.data(), idx.data());
    max_pool2d_backward(ctx, s, gy.data(), idx.data(), gx.data());

    Pool2dShape cl = s;
    cl.channels_last = true;
    const auto x_cl = to_nhwc(x, n, c, h, w), gy_cl = to_nhwc(gy, n, c, s.ho, s.wo);
    std::vector<float> y_cl(ny), gx_cl(nx, 5.0f);
    std::vector<int64_t> idx_cl(ny);
    max_pool2d_forward(ctx, cl, x_cl.data(), y_cl.data(), idx_cl.data());
    max_pool2d_backward(ctx, cl, gy_cl.data(), idx_cl.data(), gx_cl.data());
    EXPECT_EQ(idx_cl, to_nhwc(idx, n, c, s.ho, s.wo));
    expect_codes_name_indices(ctx, s, x, idx, gy);
    expect_codes_name_indices(ctx, cl, x_cl, idx_cl, gy_cl);
    EXPECT_EQ(bits(y_cl), bits(to_nhwc(y, n, c, s.ho, s.wo)));
    EXPECT_EQ(bits(gx_cl), bits(to_nhwc(gx, n, c, h, w)));
  }
}

}  // namespace
}  // namespace dpe::host
