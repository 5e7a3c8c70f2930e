// The fused batch norm kernels (batch_norm_relu.h) give bit for bit what the kernels give one
// after the other. Batch norm + ReLU and + residual sum + ReLU: over batch_norm_test's shapes, with
// and without affine parameters, and where the normalised value is a rounding residual or NaN.
// Batch norm + ReLU + max pooling: batch_norm_relu_forward then max_pool2d_forward (into window
// codes), and max_pool2d_backward then batch_norm_relu_backward. Shapes cover one block and several
// (block edges inside an image and between a channel's planes), overlapping and padded windows,
// poolings that drop the last row and column, and both layouts, with 1 and 2 threads: a block is 64
// Ki floats a thread, so the large shapes span several blocks at these counts.
#include "kernels/host/batch_norm_relu.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/host/batch_norm.h"
#include "kernels/host/elementwise.h"
#include "kernels/host/max_pool2d.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::random_floats;

class BatchNormReluTest : public ::testing::TestWithParam<BatchNormShape> {};

// Inputs of a fused kernel's test: random x, gy and parameters (seeds from `seed` on).
struct FusedCase {
  BatchNormShape sh;
  int64_t total;
  std::vector<float> x, gy, gamma, beta;
  FusedCase(const BatchNormShape& shape, uint32_t seed)
      : sh(shape),
        total(shape.n * shape.c * shape.s),
        x(random_floats(total, seed, -2.0f, 3.0f)),
        gy(random_floats(total, seed + 1)),
        gamma(random_floats(shape.c, seed + 2, -1.5f, 1.5f)),
        beta(random_floats(shape.c, seed + 3)) {}
  // f(gamma, beta) with the parameters, then without them (affine=False: null).
  template <class F>
  void with_and_without_affine(const F& f) const {
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(affine ? "affine" : "affine=False");
      f(affine ? gamma.data() : nullptr, affine ? beta.data() : nullptr);
    }
  }
};

// Equal as bits, NaN included.
template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// Not a vacuous comparison of a ReLU's outputs: some are clipped and some are not (two values may
// not be).
void expect_clipped_and_not(const std::vector<float>& y) {
  const auto zeros = std::count(y.begin(), y.end(), 0.0f);
  if (y.size() > 2) {
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, static_cast<int64_t>(y.size()));
  }
}

// The fused BatchNorm2d + ReLU gives bit for bit what the two kernels give one after the other:
// y = max(batch_norm(x), 0), and the backward of batch norm fed relu_backward's gradient
// (gy where y > 0). With and without affine parameters; about half the outputs are clipped.
TEST_P(BatchNormReluTest, FusedReluIsTheReluOfTheUnfused) {
  HostContext ctx;
  const FusedCase in(GetParam(), 21);
  const BatchNormShape& sh = in.sh;
  const int64_t total = in.total;
  const float eps = 1e-5f;
  in.with_and_without_affine([&](const float* g, const float* b) {
    std::vector<float> y(total), mean(sh.c), var(sh.c), masked(total);
    batch_norm_forward_train(ctx, sh, in.x.data(), g, b, eps, y.data(), mean.data(), var.data());
    for (int64_t k = 0; k < total; ++k) y[k] = y[k] < 0.0f ? 0.0f : y[k];
    for (int64_t k = 0; k < total; ++k) masked[k] = y[k] > 0.0f ? in.gy[k] : 0.0f;
    std::vector<float> gx(total), gg(sh.c), gb(sh.c);
    batch_norm_backward(ctx, sh, in.x.data(), masked.data(), g, mean.data(), var.data(), eps,
                        gx.data(), gg.data(), gb.data());

    std::vector<float> fy(total), fmean(sh.c), fvar(sh.c);
    batch_norm_relu_forward(ctx, sh, in.x.data(), g, b, eps, fy.data(), fmean.data(), fvar.data());
    EXPECT_EQ(fy, y);
    EXPECT_EQ(fmean, mean);
    EXPECT_EQ(fvar, var);
    std::vector<float> fgx(total), fgg(sh.c), fgb(sh.c);
    batch_norm_relu_backward(ctx, sh, in.x.data(), in.gy.data(), g, b, mean.data(), var.data(), eps,
                             fgx.data(), fgg.data(), fgb.data());
    EXPECT_EQ(fgx, gx);
    EXPECT_EQ(fgg, gg);
    EXPECT_EQ(fgb, gb);
    expect_clipped_and_not(y);
  });
}

// The end of a ResNet block fused, max(batch_norm(x) + residual, 0) and its gradients, is bit for
// bit the three kernels apart: batch_norm_forward_train, add_forward, relu_forward, then
// relu_backward (whose result is the residual's gradient) and batch_norm_backward. The residual
// puts some sums exactly at 0 (the mask's edge) and one NaN among them.
TEST_P(BatchNormReluTest, FusedAddReluIsTheOpsApart) {
  HostContext ctx;
  const FusedCase in(GetParam(), 41);
  const BatchNormShape& sh = in.sh;
  const int64_t total = in.total;
  const float eps = 1e-5f;
  in.with_and_without_affine([&](const float* g, const float* b) {
    std::vector<float> h(total), mean(sh.c), var(sh.c);
    batch_norm_forward_train(ctx, sh, in.x.data(), g, b, eps, h.data(), mean.data(), var.data());
    auto residual = random_floats(total, 45, -1.0f, 1.0f);
    for (int64_t k = 0; k < total; k += 3) residual[k] = -h[k];  // sums of exactly 0
    if (total > 4) residual[4] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> sum(total), y(total), gr(total), gx(total), gg(sh.c), gb(sh.c);
    add_forward(ctx, h.data(), residual.data(), 1.0f, sum.data(), total);
    relu_forward(ctx, sum.data(), y.data(), total);
    relu_backward(ctx, y.data(), in.gy.data(), gr.data(), total);
    batch_norm_backward(ctx, sh, in.x.data(), gr.data(), g, mean.data(), var.data(), eps, gx.data(),
                        gg.data(), gb.data());

    std::vector<float> fy(total), fmean(sh.c), fvar(sh.c);
    batch_norm_add_relu_forward(ctx, sh, in.x.data(), residual.data(), g, b, eps, fy.data(),
                                fmean.data(), fvar.data());
    std::vector<float> fgx(total), fgr(total), fgg(sh.c), fgb(sh.c);
    batch_norm_add_relu_backward(ctx, sh, in.x.data(), fy.data(), in.gy.data(), g, fmean.data(),
                                 fvar.data(), eps, fgx.data(), fgr.data(), fgg.data(), fgb.data());
    EXPECT_TRUE(same_bits(fy, y));
    EXPECT_EQ(fmean, mean);
    EXPECT_EQ(fvar, var);
    EXPECT_TRUE(same_bits(fgr, gr));
    EXPECT_TRUE(same_bits(fgx, gx));
    EXPECT_EQ(fgg, gg);
    EXPECT_EQ(fgb, gb);
    expect_clipped_and_not(y);
  });
}

// Where the normalised value is a rounding residual (an element equal to a mean that is not a
// power of two) its sign is the evaluation's, and the backward's mask must be the forward's; a NaN
// stays NaN forward and its gradient is masked, as relu and relu_backward do. Channel 0 holds the
// NaN (its statistics are NaN), the others the values at their means.
TEST(BatchNormFusedReluTest, MaskAtTheMeanAndNaNAreTheUnfusedOnes) {
  HostContext ctx;
  const BatchNormShape sh{3, 4, 2};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // [n][c][s]: per channel, n = 0, 1, 2 at mean - d, mean, mean + d.
  const float means[4] = {1.0f, 3.0f, 0.2f, 1.1f}, spreads[4] = {0.5f, 1.0f, 0.1f, 0.1f};
  std::vector<float> x(sh.n * sh.c * sh.s);
  for (int64_t i = 0; i < sh.n; ++i) {
    for (int64_t ch = 0; ch < sh.c; ++ch) {
      for (int64_t j = 0; j < sh.s; ++j) {
        x[(i * sh.c + ch) * sh.s + j] = means[ch] + static_cast<float>(i - 1) * spreads[ch];
      }
    }
  }
  x[1] = nan;
  const auto gy = random_floats(static_cast<int64_t>(x.size()), 31);
  const int64_t total = static_cast<int64_t>(x.size());
  std::vector<float> y(total), mean(sh.c), var(sh.c), masked(total), gx(total), gg(sh.c), gb(sh.c);
  batch_norm_forward_train(ctx, sh, x.data(), nullptr, nullptr, 1e-5f, y.data(), mean.data(),
                           var.data());
  for (float& v : y) v = v < 0.0f ? 0.0f : v;
  for (int64_t k = 0; k < total; ++k) masked[k] = y[k] > 0.0f ? gy[k] : 0.0f;
  batch_norm_backward(ctx, sh, x.data(), masked.data(), nullptr, mean.data(), var.data(), 1e-5f,
                      gx.data(), gg.data(), gb.data());
  std::vector<float> fy(total), fgx(total), fgg(sh.c), fgb(sh.c);
  batch_norm_relu_forward(ctx, sh, x.data(), nullptr, nullptr, 1e-5f, fy.data(), mean.data(),
                          var.data());
  batch_norm_relu_backward(ctx, sh, x.data(), gy.data(), nullptr, nullptr, mean.data(), var.data(),
                           1e-5f, fgx.data(), fgg.data(), fgb.data());
  EXPECT_TRUE(same_bits(fy, y));
  EXPECT_TRUE(same_bits(fgx, gx));
  EXPECT_TRUE(same_bits(fgg, gg));
  EXPECT_TRUE(same_bits(fgb, gb));
  EXPECT_TRUE(std::isnan(fy[1]));
  EXPECT_FALSE(std::isnan(fy[sh.s]));  // channel 1 keeps finite values
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormReluTest,
                         ::testing::ValuesIn(testing::batch_norm_shapes()));

struct Case {
  int64_t n, c, h, w, kernel, stride, padding;
  bool channels_last;
  bool nan = false;
};

class BatchNormReluMaxPoolTest : public ::testing::TestWithParam<Case> {};

void expect_fused_equals_apart(const Case& k) {
  const BatchNormShape sh{k.n, k.c, k.h * k.w, k.channels_last};
  const int64_t ho = (k.h + 2 * k.padding - k.kernel) / k.stride + 1;
  const int64_t wo = (k.w + 2 * k.padding - k.kernel) / k.stride + 1;
  const Pool2dShape pool{k.n,      k.c,       k.h, k.w, k.kernel,
                         k.stride, k.padding, ho,  wo,  k.channels_last};
  const int64_t total = k.n * k.c * k.h * k.w, pooled = k.n * k.c * ho * wo;
  const float eps = 1e-5f;
  HostContext ctx;
  // About 40% of the normalised values are clipped, so windows of zeros tie. With k.nan, channel
  // 1 holds a NaN (its statistics, outputs and gradients are NaN, as the ops apart make them).
  auto x = random_floats(total, 41, -2.0f, 3.0f);
  if (k.nan) x[k.channels_last ? 1 : k.h * k.w] = std::numeric_limits<float>::quiet_NaN();
  // Two gradients -0, which the pooling's backward makes +0 (0.0f + g) in both.
  auto gy = random_floats(pooled, 42);
  gy[0] = -0.0f;
  gy[pooled / 2] = -0.0f;
  const auto gamma = random_floats(k.c, 43, -1.5f, 1.5f), beta = random_floats(k.c, 44);
  for (const bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "affine" : "affine=False");
    const float* g = affine ? gamma.data() : nullptr;
    const float* b = affine ? beta.data() : nullptr;
    // Unfused.
    std::vector<float> full(total), y(pooled), mean(k.c), var(k.c);
    std::vector<int64_t> idx(pooled);
    batch_norm_relu_forward(ctx, sh, x.data(), g, b, eps, full.data(), mean.data(), var.data());
    max_pool2d_forward(ctx, pool, full.data(), y.data(), idx.data());
    std::vector<float> gfull(total), gx(total), gg(k.c), gb(k.c);
    max_pool2d_backward(ctx, pool, gy.data(), idx.data(), gfull.data());
    batch_norm_relu_backward(ctx, sh, x.data(), gfull.data(), g, b, mean.data(), var.data(), eps,
                             gx.data(), gg.data(), gb.data());
    // Fused.
    std::vector<float> fy(pooled), fmean(k.c), fvar(k.c);
    std::vector<uint8_t> codes(pooled);
    batch_norm_relu_max_pool_forward(ctx, sh, pool, x.data(), g, b, eps, fy.data(), codes.data(),
                                     fmean.data(), fvar.data());
    std::vector<float> fgx(total), fgg(k.c), fgb(k.c);
    batch_norm_relu_max_pool_backward(ctx, sh, pool, x.data(), gy.data(), codes.data(), g, b,
                                      fmean.data(), fvar.data(), eps, fgx.data(), fgg.data(),
                                      fgb.data());
    // The codes are the unfused pooling's (max_pool2d_test: they name its indices).
    std::vector<float> unused(pooled);
    std::vector<uint8_t> codes_apart(pooled);
    max_pool2d_forward(ctx, pool, full.data(), unused.data(), codes_apart.data());
    EXPECT_TRUE(same_bits(fy, y));
    EXPECT_TRUE(same_bits(codes, codes_apart));
    EXPECT_TRUE(same_bits(fmean, mean));
    EXPECT_TRUE(same_bits(fvar, var));
    EXPECT_TRUE(same_bits(fgx, gx));
    EXPECT_TRUE(same_bits(fgg, gg));
    EXPECT_TRUE(same_bits(fgb, gb));
    // Not vacuous: some pooled outputs are 0 (all-clipped windows), some are not.
    const auto zeros = std::count(y.begin(), y.end(), 0.0f);
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, pooled);
    if (k.nan) {
      EXPECT_TRUE(std::isnan(fmean[1]));
    }
  }
}

TEST_P(BatchNormReluMaxPoolTest, IsBitForBitTheUnfusedKernels) {
  for (const int threads : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    omp_set_num_threads(threads);
    expect_fused_equals_apart(GetParam());
  }
  omp_set_num_threads(omp_get_num_procs());
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, BatchNormReluMaxPoolTest,
    ::testing::Values(Case{4, 16, 28, 28, 2, 2, 0, false},   // the ConvNet's first layer
                      Case{6, 32, 14, 14, 2, 2, 0, false},   // its second: 7 wide
                      Case{3, 5, 7, 9, 2, 2, 0, false},      // odd sizes drop the edge
                      Case{3, 5, 9, 9, 3, 2, 1, false},      // overlapping, padded (ResNet's stem)
                      Case{64, 16, 28, 28, 2, 2, 0, false},  // blocks end mid-batch, mid-channel
                      Case{4, 16, 28, 28, 2, 2, 0, true},    // channels last
                      Case{3, 5, 9, 9, 3, 2, 1, true},
                      Case{24, 16, 28, 28, 2, 2, 0, true},  // several blocks of images
                      // several blocks, the last row and column dropped
                      Case{64, 7, 29, 31, 2, 2, 0, false}, Case{40, 3, 63, 65, 3, 2, 1, false},
                      Case{24, 5, 27, 29, 2, 2, 0, true}, Case{24, 5, 27, 29, 3, 2, 1, true},
                      // channels last, one to three vectors of channels (the sums in
                      // registers), also where the last row and column drop
                      Case{6, 32, 14, 14, 2, 2, 0, true}, Case{5, 16, 27, 29, 2, 2, 0, true},
                      Case{3, 48, 9, 7, 2, 2, 0, true},
                      // small images: blocks of several images for the sums, a partial last one
                      Case{301, 16, 6, 6, 2, 2, 0, true}, Case{70, 8, 3, 3, 3, 2, 1, true},
                      Case{41, 32, 6, 6, 2, 2, 0, true},
                      Case{12, 5, 8, 6, 2, 2, 0, true},  // 5 channels, no edge dropped
                      // channels last, any window: 8 channels two rows a register (ResNet-tiny's
                      // stem; 7x7 images leave a lone last row), 16, 32 (one or two vectors),
                      // 24 (a masked last vector, the sums in memory), up to 9 windows a pixel
                      Case{20, 8, 14, 14, 3, 2, 1, true}, Case{7, 8, 7, 7, 3, 2, 1, true},
                      Case{5, 8, 10, 10, 2, 2, 0, true}, Case{5, 8, 11, 9, 2, 2, 0, true},
                      Case{4, 16, 11, 11, 2, 3, 1, true},  // windows apart, with gaps
                      Case{5, 16, 13, 11, 3, 2, 1, true}, Case{3, 32, 9, 9, 3, 1, 1, true},
                      Case{3, 24, 9, 9, 3, 2, 1, true}, Case{6, 8, 11, 12, 4, 3, 2, true},
                      Case{4, 16, 28, 28, 2, 2, 0, false, true},  // a NaN
                      Case{4, 16, 28, 28, 2, 2, 0, true, true}));

}  // namespace
}  // namespace dpe::host
