#include "kernels/host/conv2d.h"

#include <gtest/gtest.h>

#include "kernels/host/conv2d_gemm.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;
using testing::to_nhwc;

struct Case {
  int64_t n, c, h, w, o, kh, kw, stride, padding;
};

class Conv2dTest : public ::testing::TestWithParam<Case> {};

TEST_P(Conv2dTest, ForwardAndBackwardMatchReference) {
  const Case k = GetParam();
  const Conv2dShape s = conv2d_shape(k.n, k.c, k.h, k.w, k.o, k.kh, k.kw, k.stride, k.padding);
  HostContext ctx;
  const int64_t nx = s.n * s.c * s.h * s.w, nw = s.o * s.c * s.kh * s.kw;
  const int64_t ny = s.n * s.o * s.ho * s.wo;
  const auto x = random_floats(nx, 1), w = random_floats(nw, 2), b = random_floats(s.o, 3);
  const auto gy = random_floats(ny, 4);

  std::vector<double> want_y(ny), want_gx(nx, 0.0), want_gw(nw, 0.0), want_gb(s.o, 0.0);
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t o = 0; o < s.o; ++o) {
      for (int64_t oh = 0; oh < s.ho; ++oh) {
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t yi = ((i * s.o + o) * s.ho + oh) * s.wo + ow;
          double acc = b[o];
          const double g = gy[yi];
          want_gb[o] += g;
          for (int64_t c = 0; c < s.c; ++c) {
            for (int64_t a = 0; a < s.kh; ++a) {
              for (int64_t e = 0; e < s.kw; ++e) {
                const int64_t ih = oh * s.stride - s.padding + a;
                const int64_t iw = ow * s.stride - s.padding + e;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t xi = ((i * s.c + c) * s.h + ih) * s.w + iw;
                const int64_t wi = ((o * s.c + c) * s.kh + a) * s.kw + e;
                acc += double(x[xi]) * w[wi];
                want_gx[xi] += g * w[wi];
                want_gw[wi] += g * x[xi];
              }
            }
          }
          want_y[yi] = acc;
        }
      }
    }
  }

  std::vector<float> y(ny);
  conv2d_forward(ctx, s, x.data(), w.data(), b.data(), y.data());
  expect_close(want_y, y, 1e-4, 1e-4, "conv2d y");
  std::vector<float> gx(nx), gw(nw), gb(s.o);
  conv2d_backward(ctx, s, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
  expect_close(want_gx, gx, 1e-4, 1e-4, "conv2d gx");
  expect_close(want_gw, gw, 1e-4, 1e-4, "conv2d gw");
  expect_close(want_gb, gb, 1e-4, 1e-4, "conv2d gb");

  // Again through the cached primitives, without bias, one gradient at a time.
  conv2d_forward(ctx, s, x.data(), w.data(), nullptr, y.data());
  for (int64_t i = 0; i < ny; ++i) want_y[i] -= b[(i / (s.ho * s.wo)) % s.o];
  expect_close(want_y, y, 1e-4, 1e-4, "conv2d y without bias");
  std::vector<float> gb2(s.o);
  conv2d_backward(ctx, s, x.data(), w.data(), gy.data(), nullptr, nullptr, gb2.data());
  expect_close(want_gb, gb2, 1e-4, 1e-4, "conv2d gb alone");
  std::vector<float> gw2(nw);
  conv2d_backward(ctx, s, x.data(), w.data(), gy.data(), nullptr, gw2.data(), nullptr);
  expect_close(want_gw, gw2, 1e-4, 1e-4, "conv2d gw alone");
  std::vector<float> gx1(nx);
  conv2d_backward(ctx, s, x.data(), w.data(), gy.data(), gx1.data(), nullptr, nullptr);
  expect_close(want_gx, gx1, 1e-4, 1e-4, "conv2d gx alone");

  // Channels last: the activations and their gradients NHWC, the weights OIHW.
  Conv2dShape cl = s;
  cl.channels_last = true;
  const auto x_cl = to_nhwc(x, s.n, s.c, s.h, s.w), gy_cl = to_nhwc(gy, s.n, s.o, s.ho, s.wo);
  for (int64_t i = 0; i < ny; ++i) want_y[i] += b[(i / (s.ho * s.wo)) % s.o];
  conv2d_forward(ctx, cl, x_cl.data(), w.data(), b.data(), y.data());
  expect_close(to_nhwc(want_y, s.n, s.o, s.ho, s.wo), y, 1e-4, 1e-4, "conv2d y, channels last");
  conv2d_backward(ctx, cl, x_cl.data(), w.data(), gy_cl.data(), gx.data(), gw.data(), gb.data());
  expect_close(to_nhwc(want_gx, s.n, s.c, s.h, s.w), gx, 1e-4, 1e-4, "conv2d gx, channels last");
  expect_close(want_gw, gw, 1e-4, 1e-4, "conv2d gw, channels last");
  expect_close(want_gb, gb, 1e-4, 1e-4, "conv2d gb, channels last");
  conv2d_backward(ctx, cl, x_cl.data(), w.data(), gy_cl.data(), nullptr, nullptr, gb2.data());
  expect_close(want_gb, gb2, 1e-4, 1e-4, "conv2d gb alone, channels last");
  conv2d_backward(ctx, cl, x_cl.data(), w.data(), gy_cl.data(), nullptr, gw2.data(), nullptr);
  expect_close(want_gw, gw2, 1e-4, 1e-4, "conv2d gw alone, channels last");
  std::vector<float> gx2(nx);
  conv2d_backward(ctx, cl, x_cl.data(), w.data(), gy_cl.data(), gx2.data(), nullptr, nullptr);
  expect_close(to_nhwc(want_gx, s.n, s.c, s.h, s.w), gx2, 1e-4, 1e-4,
               "conv2d gx alone, channels last");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dTest,
    ::testing::Values(Case{1, 1, 5, 5, 1, 3, 3, 1, 0},     // smallest
                      Case{2, 3, 7, 6, 4, 3, 3, 1, 1},     // odd, non-square input
                      Case{3, 2, 9, 8, 5, 3, 2, 2, 0},     // stride 2, rectangular kernel
                      Case{2, 4, 10, 11, 3, 5, 5, 2, 2},   // stride 2 with padding
                      Case{2, 1, 28, 28, 16, 5, 5, 1, 2},  // the ConvNet's first layer
                      // Few input channels (the weight gradient reads NHWC), and padding past
                      // the kernel's reach
                      Case{23, 1, 28, 28, 4, 5, 5, 1, 2}, Case{2, 2, 6, 5, 3, 3, 3, 3, 3},
                      Case{2, 16, 14, 14, 32, 5, 5, 1, 2},  // and its second
                      // One input channel and one block of outputs (16 on AVX-512, 8 on AVX2):
                      // channels last runs on the caller's memory as NCHW in, blocked out
                      Case{3, 1, 9, 7, 16, 3, 3, 2, 1}, Case{2, 1, 12, 12, 8, 5, 5, 1, 2},
                      // One input channel and outputs in blocks of 16 or one of 8: channels
                      // last takes conv2d_one_channel.h (3x3 and 5x5 above and here; 7x7 as
                      // ResNet-tiny's stem; rows of outputs that end inside a block of 8 pixels)
                      Case{3, 1, 10, 13, 32, 5, 5, 2, 1}, Case{3, 1, 28, 28, 8, 7, 7, 2, 3},
                      Case{2, 1, 11, 9, 8, 7, 7, 2, 3}, Case{2, 1, 13, 17, 16, 7, 7, 1, 2},
                      Case{2, 1, 8, 19, 8, 3, 3, 1, 1},
                      // 1x1 kernels with at most 4 output pixels: channels last runs them as
                      // SGEMM (conv2d_gemm.h), on the caller's buffers (2x2, and a 1x1 image),
                      // on gathered pixels (stride 2), with zeros on the padding; 5 pixels go
                      // back to oneDNN
                      Case{3, 6, 2, 2, 5, 1, 1, 1, 0}, Case{5, 8, 1, 1, 9, 1, 1, 1, 0},
                      Case{4, 5, 3, 3, 7, 1, 1, 2, 0}, Case{2, 3, 2, 2, 4, 1, 1, 2, 1},
                      Case{2, 3, 1, 5, 4, 1, 1, 1, 0},
                      // One output pixel whose window covers the image: a linear layer over each
                      // image in either layout (ResNet-tiny's last 3x3 on 2x2 images; a window
                      // exactly the image, square or not; a 2x1 and a 1x1 image, most taps on the
                      // padding; an uneven kernel with padding; a stride past the kernel); a
                      // window that leaves a row out goes back to oneDNN
                      Case{3, 6, 2, 2, 5, 3, 3, 2, 1}, Case{2, 4, 3, 3, 3, 3, 3, 1, 0},
                      Case{2, 3, 2, 1, 4, 3, 3, 2, 1}, Case{4, 5, 1, 1, 3, 3, 3, 1, 1},
                      Case{2, 3, 3, 2, 4, 3, 2, 1, 0}, Case{2, 3, 2, 3, 4, 3, 5, 2, 1},
                      Case{2, 3, 2, 2, 4, 3, 3, 4, 1}, Case{2, 3, 4, 4, 4, 3, 3, 2, 0}));

TEST(Conv2dAsGemm, TakesOneByOneKernelsWithAtMostFourOutputPixelsInChannelsLast) {
  Conv2dShape s = conv2d_shape(100, 128, 2, 2, 256, 1, 1, 2, 0);  // ResNet-tiny's last downsample
  EXPECT_FALSE(conv2d_as_gemm(s));                                // NCHW: oneDNN
  s.channels_last = true;
  EXPECT_TRUE(conv2d_as_gemm(s));
  Conv2dShape five = conv2d_shape(2, 3, 1, 5, 4, 1, 1, 1, 0);
  five.channels_last = true;
  EXPECT_FALSE(conv2d_as_gemm(five));
  // A 3x3 kernel with 4 output pixels on a 2x2 image: mostly padding, which oneDNN skips and a
  // product of patches would multiply.
  Conv2dShape three = conv2d_shape(100, 64, 2, 2, 64, 3, 3, 1, 1);
  three.channels_last = true;
  EXPECT_FALSE(conv2d_as_gemm(three));
}

TEST(Conv2dAsGemm, TakesOneOutputPixelWhoseWindowCoversTheImageInEitherLayout) {
  Conv2dShape s = conv2d_shape(100, 64, 2, 2, 64, 3, 3, 2, 1);  // ResNet-tiny's last 3x3
  EXPECT_TRUE(conv2d_as_gemm(s));
  s.channels_last = true;
  EXPECT_TRUE(conv2d_as_gemm(s));
  // One output pixel whose window misses the image's last row and column: oneDNN.
  EXPECT_FALSE(conv2d_as_gemm(conv2d_shape(2, 3, 4, 4, 4, 3, 3, 2, 0)));
  // A window that covers the image but two output pixels: oneDNN.
  EXPECT_FALSE(conv2d_as_gemm(conv2d_shape(2, 3, 2, 2, 4, 3, 3, 1, 1)));
}

}  // namespace
}  // namespace dpe::host
