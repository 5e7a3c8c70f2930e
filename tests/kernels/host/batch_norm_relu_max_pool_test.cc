// Batch norm + ReLU + max pooling fused gives bit for bit what the kernels give one after the
// other: batch_norm_forward_train(relu) then max_pool2d_forward, and max_pool2d_backward then
// batch_norm_relu_backward. Shapes cover one block and several (block edges inside an image and
// between a channel's planes), overlapping and padded windows, and both layouts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/host/batch_norm.h"
#include "kernels/host/max_pool2d.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::random_floats;

struct Case {
  int64_t n, c, h, w, kernel, stride, padding;
  bool channels_last;
};

class BatchNormReluMaxPoolTest : public ::testing::TestWithParam<Case> {};

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

TEST_P(BatchNormReluMaxPoolTest, IsBitForBitTheUnfusedKernels) {
  const Case k = GetParam();
  const BatchNormShape sh{k.n, k.c, k.h * k.w, k.channels_last};
  const int64_t ho = (k.h + 2 * k.padding - k.kernel) / k.stride + 1;
  const int64_t wo = (k.w + 2 * k.padding - k.kernel) / k.stride + 1;
  const Pool2dShape pool{k.n,      k.c,       k.h, k.w, k.kernel,
                         k.stride, k.padding, ho,  wo,  k.channels_last};
  const int64_t total = k.n * k.c * k.h * k.w, pooled = k.n * k.c * ho * wo;
  const float eps = 1e-5f;
  HostContext ctx;
  // About 40% of the normalised values are clipped, so windows of zeros tie.
  const auto x = random_floats(total, 41, -2.0f, 3.0f), gy = random_floats(pooled, 42);
  const auto gamma = random_floats(k.c, 43, -1.5f, 1.5f), beta = random_floats(k.c, 44);
  for (const bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "affine" : "affine=False");
    const float* g = affine ? gamma.data() : nullptr;
    const float* b = affine ? beta.data() : nullptr;
    // Unfused.
    std::vector<float> full(total), y(pooled), mean(k.c), var(k.c);
    std::vector<int64_t> idx(pooled);
    batch_norm_forward_train(ctx, sh, x.data(), g, b, eps, full.data(), mean.data(), var.data(),
                             /*relu=*/true);
    max_pool2d_forward(ctx, pool, full.data(), y.data(), idx.data());
    std::vector<float> gfull(total), gx(total), gg(k.c), gb(k.c);
    max_pool2d_backward(ctx, pool, gy.data(), idx.data(), gfull.data());
    batch_norm_relu_backward(ctx, sh, x.data(), gfull.data(), g, b, mean.data(), var.data(), eps,
                             gx.data(), gg.data(), gb.data());
    // Fused.
    std::vector<float> fy(pooled), fmean(k.c), fvar(k.c);
    std::vector<int64_t> fidx(pooled);
    batch_norm_relu_max_pool_forward(ctx, sh, pool, x.data(), g, b, eps, fy.data(), fidx.data(),
                                     fmean.data(), fvar.data());
    std::vector<float> fgx(total), fgg(k.c), fgb(k.c);
    batch_norm_relu_max_pool_backward(ctx, sh, pool, x.data(), gy.data(), fidx.data(), g, b,
                                      fmean.data(), fvar.data(), eps, fgx.data(), fgg.data(),
                                      fgb.data());
    EXPECT_TRUE(same_bits(fy, y));
    EXPECT_TRUE(same_bits(fidx, idx));
    EXPECT_TRUE(same_bits(fmean, mean));
    EXPECT_TRUE(same_bits(fvar, var));
    EXPECT_TRUE(same_bits(fgx, gx));
    EXPECT_TRUE(same_bits(fgg, gg));
    EXPECT_TRUE(same_bits(fgb, gb));
    // Not vacuous: some pooled outputs are 0 (all-clipped windows), some are not.
    const auto zeros = std::count(y.begin(), y.end(), 0.0f);
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, pooled);
  }
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
                      Case{24, 16, 28, 28, 2, 2, 0, true}));  // several blocks of images

}  // namespace
}  // namespace dpe::host
