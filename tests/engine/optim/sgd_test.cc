#include "engine/optim/sgd.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/core/error.h"
#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(SgdTest, DefaultsArePyTorchs) {
  // torch.optim.SGD: momentum 0, dampening 0, weight_decay 0, nesterov False (lr has no default
  // there; dpe's is 0.01).
  const SgdOptions o;
  EXPECT_EQ(o.lr, 0.01f);
  EXPECT_EQ(o.momentum, 0.0f);
  EXPECT_EQ(o.dampening, 0.0f);
  EXPECT_EQ(o.weight_decay, 0.0f);
  EXPECT_FALSE(o.nesterov);
}

TEST(SgdTest, MomentumDampeningWeightDecayNesterov) {
  for (bool nesterov : {false, true}) {
    Tensor p = param({1.0f, -2.0f});
    SgdOptions o;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.weight_decay = 0.01f;
    o.nesterov = nesterov;
    SGD sgd({p}, o);
    double ref[2] = {1.0, -2.0}, buf[2] = {0, 0};
    const double grads[3][2] = {{0.5, -0.25}, {0.1, 0.2}, {-0.3, 0.4}};
    for (int step = 0; step < 3; ++step) {
      set_grad(p, {static_cast<float>(grads[step][0]), static_cast<float>(grads[step][1])});
      sgd.step();
      for (int k = 0; k < 2; ++k) {
        double g = grads[step][k] + 0.01 * ref[k];
        buf[k] = step == 0 ? g : 0.9 * buf[k] + g;
        ref[k] -= 0.1 * (nesterov ? g + 0.9 * buf[k] : buf[k]);
      }
    }
    const auto got = p.to_vector<float>();
    EXPECT_NEAR(got[0], ref[0], 1e-6) << "nesterov=" << nesterov;
    EXPECT_NEAR(got[1], ref[1], 1e-6) << "nesterov=" << nesterov;
  }
}

TEST(SgdTest, DampeningAndSkippedParameters) {
  Tensor p = param({1.0f}), q = param({5.0f});
  SgdOptions o;
  o.lr = 1.0f;
  o.momentum = 0.5f;
  o.dampening = 0.5f;
  SGD sgd({p, q}, o);
  set_grad(p, {1.0f});
  sgd.step();  // buf = 1 (first step: no dampening)
  set_grad(p, {1.0f});
  sgd.step();  // buf = 0.5 + 0.5 = 1
  EXPECT_NEAR(p.to_vector<float>()[0], -1.0f, 1e-6);
  EXPECT_EQ(q.to_vector<float>()[0], 5.0f);  // no gradient: untouched
}

TEST(SgdTest, MomentumBuffersCountAsOptimizerState) {
  Tensor p = param({1.0f, 2.0f});
  SgdOptions o;
  o.momentum = 0.9f;
  SGD sgd({p}, o);
  set_grad(p, {0.1f, 0.1f});
  sgd.step();
  ASSERT_EQ(sgd.state_dict().size(), 1u);
  EXPECT_EQ(sgd.state_dict()[0].second.memory_category(), MemoryCategory::kOptimizerState);
}

// A state key whose index is not a number is a dpe::Error naming it, not std::stoul's
// std::invalid_argument; an index past the parameters or a buffer of another shape or dtype too.
TEST(SgdTest, LoadStateDictNamesABadKey) {
  Tensor p = param({1.0f, 2.0f});
  SgdOptions o;
  o.momentum = 0.9f;
  SGD sgd({p}, o);
  for (const auto& [key, value] :
       {std::pair<std::string, Tensor>{"state.x.momentum_buffer", Tensor::zeros({2})},
        {"state.-1.momentum_buffer", Tensor::zeros({2})},
        {"state.1.momentum_buffer", Tensor::zeros({2})},
        {"state.0.momentum_buffer", Tensor::zeros({3})},
        {"state.0.momentum_buffer", Tensor::from_vector(std::vector<int64_t>{1, 2}, Shape{2})}}) {
    try {
      sgd.load_state_dict({{key, value}});
      ADD_FAILURE() << key << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + key + "'"), std::string::npos) << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << key << ": not a dpe::Error: " << e.what();
    }
  }
}

}  // namespace
}  // namespace dpe::optim
