// scaled_dot_product_attention's forward against attention written out in double, causal or not;
// its gradients are checked by gradcheck_test.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/ops.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

TEST(AttentionTest, MatchesSoftmaxOfScaledScoresTimesValues) {
  Generator gen(3);
  const int64_t b = 2, h = 3, t = 5, e = 4, ev = 6;
  Tensor q = randn({b, h, t, e}, gen), k = randn({b, h, t, e}, gen), v = randn({b, h, t, ev}, gen);
  const auto qv = q.to_vector<float>(), kv = k.to_vector<float>(), vv = v.to_vector<float>();
  for (bool causal : {false, true}) {
    const auto got = ops::scaled_dot_product_attention(q, k, v, causal).to_vector<float>();
    ASSERT_EQ(got.size(), static_cast<size_t>(b * h * t * ev));
    for (int64_t bh = 0; bh < b * h; ++bh) {
      for (int64_t i = 0; i < t; ++i) {
        std::vector<double> w(t, 0.0);
        double mx = -INFINITY, sum = 0.0;
        const int64_t keys = causal ? i + 1 : t;
        for (int64_t j = 0; j < keys; ++j) {
          for (int64_t d = 0; d < e; ++d) w[j] += double(qv[(bh * t + i) * e + d]) * kv[(bh * t + j) * e + d];
          w[j] /= std::sqrt(double(e));
          mx = std::max(mx, w[j]);
        }
        for (int64_t j = 0; j < keys; ++j) sum += (w[j] = std::exp(w[j] - mx));
        for (int64_t d = 0; d < ev; ++d) {
          double want = 0.0;
          for (int64_t j = 0; j < keys; ++j) want += w[j] / sum * vv[(bh * t + j) * ev + d];
          EXPECT_NEAR(got[(bh * t + i) * ev + d], want, 1e-5)
              << "causal=" << causal << " bh=" << bh << " i=" << i << " d=" << d;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dpe
