#include "engine/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "tests/engine/optim/params.h"

namespace dpe::optim {
namespace {

using testing::param;
using testing::set_grad;

TEST(AdamTest, MatchesTorchFormulasForAdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Tensor p = param({0.5f});
    AdamOptions o;
    o.lr = 0.01f;
    o.weight_decay = 0.1f;
    AdamWOptions w;
    w.lr = o.lr;
    w.weight_decay = o.weight_decay;
    std::unique_ptr<Adam> made = decoupled ? std::make_unique<AdamW>(std::vector<Tensor>{p}, w)
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

TEST(AdamTest, DefaultsArePyTorchs) {
  // torch.optim.Adam: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.
  const AdamOptions adam;
  EXPECT_EQ(adam.lr, 1e-3f);
  EXPECT_EQ(adam.beta1, 0.9);
  EXPECT_EQ(adam.beta2, 0.999);
  EXPECT_EQ(adam.eps, 1e-8f);
  EXPECT_EQ(adam.weight_decay, 0.0f);
  EXPECT_FALSE(adam.adamw);
  // torch.optim.AdamW: the same but weight_decay 0.01.
  const AdamWOptions adamw;
  EXPECT_EQ(adamw.lr, 1e-3f);
  EXPECT_EQ(adamw.beta1, 0.9);
  EXPECT_EQ(adamw.beta2, 0.999);
  EXPECT_EQ(adamw.eps, 1e-8f);
  EXPECT_EQ(adamw.weight_decay, 0.01f);
}

TEST(AdamTest, DefaultAdamWDecaysTheWeightsAsPyTorch) {
  // One step from x = 2 with g = 0.5: x *= 1 - 1e-3 * 0.01, then Adam's first step moves it by
  // lr * g / (|g| + eps) = 1e-3 (up to eps).
  Tensor p = param({2.0f});
  AdamW opt({p});
  set_grad(p, {0.5f});
  opt.step();
  const double want = 2.0 * (1 - 1e-3 * 0.01) - 1e-3 * 0.5 / (0.5 + 1e-8);
  EXPECT_NEAR(p.to_vector<float>()[0], want, 1e-7);
}

}  // namespace
}  // namespace dpe::optim
