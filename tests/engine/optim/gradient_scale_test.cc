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
  // A channels-last gradient (a convolution's) is scaled in its own layout.
  Tensor cl = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2})
                  .contiguous(MemoryFormat::kChannelsLast);
  ASSERT_FALSE(cl.is_contiguous());
  scale_gradient_(cl, 2.0f);
  EXPECT_TRUE(cl.is_contiguous(MemoryFormat::kChannelsLast));
  EXPECT_EQ(cl.contiguous().to_vector<float>(), (std::vector<float>{2, 4, 6, 8, 10, 12, 14, 16}));
}

}  // namespace
}  // namespace dpe::optim
