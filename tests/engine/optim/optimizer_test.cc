#include "engine/optim/optimizer.h"

#include <gtest/gtest.h>

#include "engine/optim/sgd.h"

#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(OptimizerTest, StateDictRoundTripContinuesIdentically) {
  Tensor a = param({1.0f, 2.0f}), b = param({1.0f, 2.0f});
  SgdOptions o;
  o.momentum = 0.9f;
  SGD sa({a}, o), sb({b}, o);
  set_grad(a, {0.1f, 0.2f});
  sa.step();
  b.copy_(a);
  sb.load_state_dict(sa.state_dict());
  set_grad(a, {0.3f, 0.1f});
  set_grad(b, {0.3f, 0.1f});
  sa.step();
  sb.step();
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_THROW(sb.load_state_dict({{"bogus", Tensor::zeros({2})}}), Error);
}

}  // namespace
}  // namespace dpe::optim
