#include "kernels/host/optim_step.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/host/elementwise.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

// torch.optim.SGD's single-tensor step, in double.
void sgd_reference(std::vector<double>& p, const std::vector<float>& g, std::vector<double>& buf,
                   const SgdStepParams& o, bool first) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + double(o.weight_decay) * p[i];
    if (o.momentum != 0.0f) {
      buf[i] = first ? d : o.momentum * buf[i] + (1.0 - o.dampening) * d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= o.lr * d;
  }
}

// Every combination of the options (each is a loop of its own in the kernel), below and above the
// size at which the loop is split between threads.
TEST(OptimStepTest, SgdMatchesTorchFormulas) {
  HostContext ctx;
  for (int64_t n : {int64_t{1001}, kParallelGrain + 17}) {
    for (SgdStepParams o : {SgdStepParams{0.1f, 0.0f, 0.0f, 0.0f, false},
                            SgdStepParams{0.1f, 0.0f, 0.0f, 1e-2f, false},
                            SgdStepParams{0.1f, 0.9f, 0.0f, 0.0f, false},
                            SgdStepParams{0.05f, 0.9f, 0.1f, 1e-2f, false},
                            SgdStepParams{0.05f, 0.8f, 0.0f, 1e-3f, true},
                            SgdStepParams{0.05f, 0.9f, 0.0f, 0.0f, true}}) {
      auto p = random_floats(n, 1);
      std::vector<float> buf(n, 0.0f);
      std::vector<double> rp(p.begin(), p.end()), rbuf(n, 0.0);
      for (int step = 0; step < 3; ++step) {
        const auto g = random_floats(n, 10 + step);
        sgd_step(ctx, p.data(), g.data(), buf.data(), o, step == 0, n);
        sgd_reference(rp, g, rbuf, o, step == 0);
      }
      expect_close(rp, p, 1e-5, 1e-6, "sgd param");
      if (o.momentum != 0.0f) expect_close(rbuf, buf, 1e-5, 1e-6, "sgd momentum buffer");
    }
  }
}

TEST(OptimStepTest, AdamAndAdamWMatchTorchFormulas) {
  HostContext ctx;
  for (int64_t n : {int64_t{777}, kParallelGrain + 5}) {
    for (AdamStepParams o : {AdamStepParams{1e-3f, 0.9, 0.999, 1e-8f, 0.0f, false},
                             AdamStepParams{1e-2f, 0.8, 0.99, 1e-6f, 1e-2f, false},
                             AdamStepParams{1e-2f, 0.9, 0.999, 1e-8f, 1e-1f, true}}) {
      auto p = random_floats(n, 2);
      std::vector<float> m(n, 0.0f), v(n, 0.0f);
      std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
      for (int64_t step = 1; step <= 4; ++step) {
        const auto g = random_floats(n, 20 + step);
        adam_step(ctx, p.data(), g.data(), m.data(), v.data(), o, step, n);
        const double bc1 = 1.0 - std::pow(double(o.beta1), step);
        const double bc2 = 1.0 - std::pow(double(o.beta2), step);
        for (int64_t i = 0; i < n; ++i) {
          double gi = g[i];
          if (o.adamw) {
            rp[i] *= 1.0 - double(o.lr) * o.weight_decay;
          } else {
            gi += double(o.weight_decay) * rp[i];
          }
          rm[i] = o.beta1 * rm[i] + (1.0 - o.beta1) * gi;
          rv[i] = o.beta2 * rv[i] + (1.0 - o.beta2) * gi * gi;
          const double denom = std::sqrt(rv[i]) / std::sqrt(bc2) + o.eps;
          rp[i] -= o.lr / bc1 * rm[i] / denom;
        }
      }
      expect_close(rp, p, 1e-4, 1e-6, "adam param");
      expect_close(rm, m, 1e-4, 1e-7, "adam exp_avg");
      expect_close(rv, v, 1e-4, 1e-9, "adam exp_avg_sq");
    }
  }
}

// PyTorch hands 1 - beta to its float kernels from Python's double betas: one rounding. From a
// float beta2 = 0.999f, 1 - beta2 would be 0.00099998713, 1.3e-5 below PyTorch's 0.0010000000475.
TEST(OptimStepTest, AdamRoundsOneMinusBetaOnceFromDouble) {
  HostContext ctx;
  float p = 1.0f, m = 0.0f, v = 0.0f;
  const float g = 1.0f;
  adam_step(ctx, &p, &g, &m, &v, AdamStepParams{1e-3f, 0.9, 0.999, 1e-8f, 0.0f, false}, 1, 1);
  EXPECT_EQ(m, static_cast<float>(1.0 - 0.9));
  EXPECT_EQ(v, static_cast<float>(1.0 - 0.999));
}

}  // namespace
}  // namespace dpe::host
