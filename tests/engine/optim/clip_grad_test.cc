#include "engine/optim/clip_grad.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(ClipGradTest, GlobalNormOverDevicesScalesAboveMaxNormOnly) {
  // |(3, 4)| = 5 on host:0 and |12| on host:1: a total of 13, summed across devices.
  Tensor a = param({1, 1}), b = Tensor::from_vector(std::vector<float>{1}, {1},
                                                    Device::parse("host:1"));
  b.requires_grad_();
  Tensor no_grad = param({7});
  set_grad(a, {3, 4});
  set_grad(b, {12});
  EXPECT_NEAR(clip_grad_norm_({a, b, no_grad}, 20.0f), 13.0f, 1e-5);
  EXPECT_EQ(a.grad().to_vector<float>(), (std::vector<float>{3, 4}));  // below max_norm: kept
  EXPECT_NEAR(clip_grad_norm_({a, b, no_grad}, 6.5f), 13.0f, 1e-5);
  const double coef = 6.5 / (13.0 + 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[0], 3 * coef, 1e-6);
  EXPECT_NEAR(a.grad().to_vector<float>()[1], 4 * coef, 1e-6);
  EXPECT_NEAR(b.grad().to_vector<float>()[0], 12 * coef, 1e-6);
  EXPECT_EQ(b.grad().device(), Device::parse("host:1"));
  EXPECT_FALSE(no_grad.grad().defined());
  // The clipped gradients now have norm max_norm.
  EXPECT_NEAR(clip_grad_norm_({a, b}, 100.0f), 6.5f, 1e-5);
  EXPECT_EQ(clip_grad_norm_({no_grad}, 1.0f), 0.0f);
}

}  // namespace
}  // namespace dpe::optim
