#include "kernels/host/nll_loss.h"

#include <gtest/gtest.h>

#include "engine/core/error.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(NllLossTest, MeanReductionAndGradient) {
  HostContext ctx;
  const int64_t n = 9, c = 10;
  const auto logp = random_floats(n * c, 1, -5.0f, 0.0f);
  std::vector<int64_t> target(n);
  for (int64_t i = 0; i < n; ++i) target[i] = (i * 7) % c;
  double want = 0.0;
  for (int64_t i = 0; i < n; ++i) want -= logp[i * c + target[i]];
  want /= n;
  EXPECT_NEAR(nll_loss_forward(ctx, logp.data(), target.data(), n, c), want, 1e-6);

  std::vector<float> gx(n * c, 3.0f);
  nll_loss_backward(ctx, 2.0f, target.data(), gx.data(), n, c);
  std::vector<double> want_gx(n * c, 0.0);
  for (int64_t i = 0; i < n; ++i) want_gx[i * c + target[i]] = -2.0 / n;
  expect_close(want_gx, gx, 1e-7, 0, "nll_loss gx");
}

TEST(NllLossTest, OutOfRangeTargetThrowsLikeTorch) {
  HostContext ctx;
  const auto logp = random_floats(2 * 10, 1);
  const int64_t target[2] = {3, 12};
  try {
    nll_loss_forward(ctx, logp.data(), target, 2, 10);
    FAIL() << "expected dpe::Error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "nll_loss: target 12 is out of bounds for 10 classes");
  }
  const int64_t negative[1] = {-1};
  EXPECT_THROW(nll_loss_forward(ctx, logp.data(), negative, 1, 10), Error);
  std::vector<float> gx(20);
  EXPECT_THROW(nll_loss_backward(ctx, 1.0f, target, gx.data(), 2, 10), Error);
}

}  // namespace
}  // namespace dpe::host
