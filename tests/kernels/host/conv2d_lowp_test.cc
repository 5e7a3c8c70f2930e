// The 16-bit convolution (kernels/host/conv2d_lowp.h) against a float64 reference computed from
// the same 16-bit inputs, forward and the three gradients, in both layouts, on a first layer of
// one channel (emulated everywhere) and a layer of 16 channels (on AMX where the CPU has it).
// Tolerance: lowp_test_util.h's bound, the output's rounding plus float32 accumulation over the
// terms of each sum.
#include "kernels/host/conv2d_lowp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/host/lowp_gemm.h"
#include "tests/kernels/host/lowp_test_util.h"

namespace dpe::host {
namespace {

using lowp_testing::bound;
using lowp_testing::random_values;
using lowp_testing::Values;
using lowp_testing::widen;

// Index of (n, c, h, w) in a [N, C, H, W] tensor stored NCHW or NHWC.
int64_t at(bool nhwc, int64_t n, int64_t c, int64_t h, int64_t w, int64_t C, int64_t H,
           int64_t W) {
  return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}

struct Reference {
  std::vector<double> y, y_abs, gx, gx_abs, gw, gw_abs, gb, gb_abs;
};

// Every output and gradient of conv(x, w) + b with output gradient gy, in float64, with the sums
// of the magnitudes of the terms each adds up.
Reference reference(const Conv2dShape& s, const Values& x, const Values& w, const Values& b,
                    const Values& gy) {
  Reference r;
  r.y.assign(gy.exact.size(), 0);
  r.y_abs = r.y;
  r.gx.assign(x.exact.size(), 0);
  r.gx_abs = r.gx;
  r.gw.assign(w.exact.size(), 0);
  r.gw_abs = r.gw;
  r.gb.assign(s.o, 0);
  r.gb_abs = r.gb;
  const bool nl = s.channels_last;
  for (int64_t n = 0; n < s.n; ++n) {
    for (int64_t o = 0; o < s.o; ++o) {
      for (int64_t oh = 0; oh < s.ho; ++oh) {
        for (int64_t ow = 0; ow < s.wo; ++ow) {
          const int64_t yi = at(nl, n, o, oh, ow, s.o, s.ho, s.wo);
          r.y[yi] += b.exact[o];
          r.y_abs[yi] += std::fabs(b.exact[o]);
          r.gb[o] += gy.exact[yi];
          r.gb_abs[o] += std::fabs(gy.exact[yi]);
          for (int64_t c = 0; c < s.c; ++c) {
            for (int64_t i = 0; i < s.kh; ++i) {
              for (int64_t j = 0; j < s.kw; ++j) {
                const int64_t ih = oh * s.stride - s.padding + i;
                const int64_t iw = ow * s.stride - s.padding + j;
                if (ih < 0 || ih >= s.h || iw < 0 || iw >= s.w) continue;
                const int64_t xi = at(nl, n, c, ih, iw, s.c, s.h, s.w);
                const int64_t wi = ((o * s.c + c) * s.kh + i) * s.kw + j;
                r.y[yi] += x.exact[xi] * w.exact[wi];
                r.y_abs[yi] += std::fabs(x.exact[xi] * w.exact[wi]);
                r.gx[xi] += gy.exact[yi] * w.exact[wi];
                r.gx_abs[xi] += std::fabs(gy.exact[yi] * w.exact[wi]);
                r.gw[wi] += gy.exact[yi] * x.exact[xi];
                r.gw_abs[wi] += std::fabs(gy.exact[yi] * x.exact[xi]);
              }
            }
          }
        }
      }
    }
  }
  return r;
}

void expect_close(DType dt, const std::vector<uint16_t>& got, const std::vector<double>& ref,
                  const std::vector<double>& abs_sum, int64_t terms, const std::string& what) {
  const std::vector<double> g = widen(dt, got);
  ASSERT_EQ(g.size(), ref.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_LE(std::fabs(g[i] - ref[i]), bound(dt, ref[i], abs_sum[i], terms))
        << what << " element " << i << ": " << g[i] << " against " << ref[i];
  }
}

struct Case {
  int64_t n, c, hw, o, k, stride, padding;
};

class Conv2dLowpTest : public testing::TestWithParam<DType> {};

TEST_P(Conv2dLowpTest, ForwardAndGradientsMatchFloat64) {
  const DType dt = GetParam();
  HostContext ctx;
  for (const Case& cs : {Case{3, 1, 9, 16, 5, 1, 2}, Case{2, 16, 7, 32, 3, 1, 1},
                         Case{2, 16, 8, 16, 3, 2, 1}, Case{2, 32, 5, 16, 1, 1, 0}}) {
    for (const bool nhwc : {false, true}) {
      Conv2dShape s = conv2d_shape(cs.n, cs.c, cs.hw, cs.hw, cs.o, cs.k, cs.k, cs.stride,
                                   cs.padding);
      s.channels_last = nhwc;
      const std::string what = "c=" + std::to_string(cs.c) + " k=" + std::to_string(cs.k) +
                               " stride=" + std::to_string(cs.stride) + (nhwc ? " NHWC" : " NCHW") +
                               (conv2d_lowp_native(ctx, dt, s) ? " native" : " emulated");
      const Values x = random_values(dt, s.n * s.c * s.h * s.w, 1);
      const Values w = random_values(dt, s.o * s.c * s.kh * s.kw, 2, 0.3f);
      const Values b = random_values(dt, s.o, 3);
      const Values gy = random_values(dt, s.n * s.o * s.ho * s.wo, 4);
      const Reference r = reference(s, x, w, b, gy);
      std::vector<uint16_t> y(gy.raw.size()), gx(x.raw.size()), gw(w.raw.size()), gb(s.o);
      conv2d_forward_lowp(ctx, dt, s, x.raw.data(), w.raw.data(), b.raw.data(), y.data());
      conv2d_backward_lowp(ctx, dt, s, x.raw.data(), w.raw.data(), gy.raw.data(), gx.data(),
                           gw.data(), gb.data());
      const int64_t taps = s.c * s.kh * s.kw, pixels = s.n * s.ho * s.wo;
      expect_close(dt, y, r.y, r.y_abs, taps + 1, what + " y");
      expect_close(dt, gx, r.gx, r.gx_abs, s.o * s.kh * s.kw, what + " gx");
      expect_close(dt, gw, r.gw, r.gw_abs, pixels, what + " gw");
      expect_close(dt, gb, r.gb, r.gb_abs, pixels, what + " gb");
      // Each gradient alone is the same as computed together.
      std::vector<uint16_t> gx_alone(gx.size()), gw_alone(gw.size());
      conv2d_backward_lowp(ctx, dt, s, x.raw.data(), w.raw.data(), gy.raw.data(), gx_alone.data(),
                           nullptr, nullptr);
      conv2d_backward_lowp(ctx, dt, s, x.raw.data(), w.raw.data(), gy.raw.data(), nullptr,
                           gw_alone.data(), nullptr);
      EXPECT_EQ(gx_alone, gx) << what;
      expect_close(dt, gw_alone, r.gw, r.gw_abs, pixels, what + " gw alone");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, Conv2dLowpTest,
                         testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(Conv2dLowpNativeTest, OneChannelAndFloat16AreEmulated) {
  HostContext ctx;
  const Conv2dShape first = conv2d_shape(4, 1, 28, 28, 16, 5, 5, 1, 2);
  EXPECT_FALSE(conv2d_lowp_native(ctx, DType::kBFloat16, first));
  const Conv2dShape second = conv2d_shape(4, 16, 14, 14, 32, 5, 5, 1, 2);
  EXPECT_FALSE(conv2d_lowp_native(ctx, DType::kFloat16, second));  // oneDNN 2.6: no f16 conv
  // Where the matrix products run on AMX, a layer of 16 channels does too.
  EXPECT_EQ(conv2d_lowp_native(ctx, DType::kBFloat16, second),
            lowp_gemm_engine(DType::kBFloat16) == "AMX");
}

}  // namespace
}  // namespace dpe::host
