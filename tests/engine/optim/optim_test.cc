// Optimizer updates against the formulas of torch.optim, evaluated by hand in double.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "engine/optim/adam.h"
#include "engine/optim/lr_scheduler.h"
#include "engine/optim/sgd.h"

namespace dpe::optim {
namespace {

Tensor param(std::vector<float> v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.requires_grad_();
  return p;
}

void set_grad(Tensor& p, std::vector<float> g) {
  p.set_grad(Tensor::from_vector(g, p.shape(), p.device()));
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

TEST(AdamTest, MatchesTorchFormulasForAdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Tensor p = param({0.5f});
    AdamOptions o;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    std::unique_ptr<Adam> made = decoupled ? std::make_unique<AdamW>(std::vector<Tensor>{p}, o)
                                           : std::make_unique<Adam>(std::vector<Tensor>{p}, o);
    Adam& adam = *made;
    double x = 0.5, m = 0, v = 0;
    const double grads[4] = {0.3, -0.1, 0.2, 0.05};
    for (int t = 1; t <= 4; ++t) {
      set_grad(p, {static_cast<float>(grads[t - 1])});
      adam.step();
      double g = grads[t - 1];
      if (decoupled)
        x *= 1 - 0.01 * 0.1;
      else
        g += 0.1 * x;
      m = 0.9 * m + 0.1 * g;
      v = 0.999 * v + 0.001 * g * g;
      const double mhat = m / (1 - std::pow(0.9, t));
      const double denom = std::sqrt(v / (1 - std::pow(0.999, t))) + 1e-8;
      x -= 0.01 * mhat / denom;
    }
    EXPECT_NEAR(p.to_vector<float>()[0], x, 1e-6) << "decoupled=" << decoupled;
  }
}

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
