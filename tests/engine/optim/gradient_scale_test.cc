#include "engine/optim/gradient_scale.h"

#include <gtest/gtest.h>

#include <vector>

namespace dpe::optim {
namespace {

TEST(GradientScaleTest, ScalesInPlaceAndBumpsTheVersion) {
  Tensor g = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  const uint64_t before = g.version();
  scale_gradient_(g, 0.5f);
  EXPECT_EQ(g.to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f, 2}));
  EXPECT_GT(g.version(), before);
}

}  // namespace
}  // namespace dpe::optim
