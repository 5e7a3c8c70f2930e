#include "engine/optim/lr_scheduler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/optim/sgd.h"

#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(LrSchedulerTest, StepAndCosine) {
  Tensor p = param({0.0f});
  SgdOptions o;
  o.lr = 1.0f;
  SGD sgd({p}, o);
  StepLR step(sgd, 2, 0.5f);
  std::vector<float> lrs;
  for (int e = 0; e < 5; ++e) {
    step.step();
    lrs.push_back(sgd.lr());
  }
  EXPECT_EQ(lrs, (std::vector<float>{1.0f, 0.5f, 0.5f, 0.25f, 0.25f}));
  SGD sgd2({p}, o);
  CosineAnnealingLR cos(sgd2, 4, 0.0f);
  cos.step();
  EXPECT_NEAR(sgd2.lr(), (1 + std::cos(M_PI / 4)) / 2, 1e-6);
  cos.set_epoch(4);
  EXPECT_NEAR(sgd2.lr(), 0.0f, 1e-7);
}

}  // namespace
}  // namespace dpe::optim
