#include "kernels/host/nll_loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/core/error.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

// The kernels write their scalar to memory (as every device type's do); these read it back.
float nll_forward(HostContext& ctx, const float* logp, const int64_t* target, int64_t n, int64_t c,
                  int64_t ignore_index) {
  float out = 0.0f;
  nll_loss_forward(ctx, logp, target, &out, n, c, ignore_index);
  return out;
}
void nll_backward(HostContext& ctx, float gout, const int64_t* target, float* gx, int64_t n,
                  int64_t c, int64_t ignore_index) {
  nll_loss_backward(ctx, &gout, target, gx, n, c, ignore_index);
}

TEST(NllLossTest, MeanReductionAndGradient) {
  HostContext ctx;
  const int64_t n = 9, c = 10;
  const auto logp = random_floats(n * c, 1, -5.0f, 0.0f);
  std::vector<int64_t> target(n);
  for (int64_t i = 0; i < n; ++i) target[i] = (i * 7) % c;
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i) want -= logp[i * c + target[i]];
  want /= n;
  EXPECT_NEAR(nll_forward(ctx, logp.data(), target.data(), n, c, -100), want, 1e-6);

  std::vector<float> gx(n * c, 3.0f);
  nll_backward(ctx, 2.0f, target.data(), gx.data(), n, c, -100);
  std::vector<double> want_gx(n * c, 0.0);
  for (int64_t i = 0; i < n; ++i) want_gx[i * c + target[i]] = -2.0 / n;
  expect_close(want_gx, gx, 1e-7, 0, "nll_loss gx");
}

TEST(NllLossTest, OutOfRangeTargetThrowsLikeTorch) {
  HostContext ctx;
  const auto logp = random_floats(2 * 10, 1);
  const int64_t target[2] = {3, 12};
  try {
    nll_forward(ctx, logp.data(), target, 2, 10, -100);
    FAIL() << "expected dpe::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "nll_loss: target 12 is out of bounds for 10 classes");
  }
  const int64_t negative[1] = {-1};
  EXPECT_THROW(nll_forward(ctx, logp.data(), negative, 1, 10, -100), Error);
  std::vector<float> gx(20);
  EXPECT_THROW(nll_backward(ctx, 1.0f, target, gx.data(), 2, 10, -100), Error);
}

TEST(NllLossTest, IgnoredTargetsAreSkippedAndNotCounted) {
  HostContext ctx;
  const int64_t n = 5, c = 4;
  const auto logp = random_floats(n * c, 3, -5.0f, 0.0f);
  // -100 is PyTorch's default; any value may be ignored, 2 here, even one inside [0, c).
  for (int64_t ignore : {int64_t{-100}, int64_t{2}}) {
    const std::vector<int64_t> target = {1, ignore, 3, ignore, 0};
    const double want = -(logp[0 * c + 1] + logp[2 * c + 3] + logp[4 * c + 0]) / 3.0;
    EXPECT_NEAR(nll_forward(ctx, logp.data(), target.data(), n, c, ignore), want, 1e-6);
    std::vector<float> gx(n * c, 9.0f);
    nll_backward(ctx, 1.5f, target.data(), gx.data(), n, c, ignore);
    std::vector<double> want_gx(n * c, 0.0);
    for (int64_t i : {0, 2, 4}) want_gx[i * c + target[i]] = -1.5 / 3.0;
    expect_close(want_gx, gx, 1e-7, 0, "nll_loss gx with ignored targets");
  }
  // Everything ignored: 0 / 0, NaN as in PyTorch.
  const std::vector<int64_t> none = {-100, -100};
  EXPECT_TRUE(std::isnan(nll_forward(ctx, logp.data(), none.data(), 2, c, -100)));
}

}  // namespace
}  // namespace dpe::host
