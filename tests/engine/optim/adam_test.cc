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

}  // namespace
}  // namespace dpe::optim
