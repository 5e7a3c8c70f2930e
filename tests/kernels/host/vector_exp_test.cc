#include "kernels/host/vector_exp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace dpe::host::vec {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float exp1(float x) {
  float buf[kLanes];
  store(buf, exp(splat(x)));
  return buf[0];
}

// Within 2 ulp of the double exp everywhere it neither underflows nor overflows, every lane
// computing its own value (a sweep of 2^20 points over [-87.3, 88.3], 16 at a time).
TEST(VectorExpTest, WithinTwoUlpOfExp) {
  const int64_t n = int64_t{1} << 20;
  const double lo = -87.3, hi = 88.3;
  std::vector<float> x(n), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(lo + (hi - lo) * i / (n - 1));
  for (int64_t i = 0; i < n; i += kLanes) store(y.data() + i, exp(load(x.data() + i)));
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = std::exp(static_cast<double>(x[i]));
    const double ulp = std::nextafter(static_cast<float>(want), kInf) - static_cast<float>(want);
    worst = std::max(worst, std::abs(y[i] - want) / ulp);
  }
  EXPECT_LE(worst, 2.0);
}

// exp(-inf) and anything below ln(FLT_MIN) is exactly 0 (a masked softmax entry), exp(0) exactly
// 1 (the row's maximum), a NaN stays NaN, +inf and beyond 88.37 are +inf.
TEST(VectorExpTest, EdgeValues) {
  EXPECT_EQ(exp1(-kInf), 0.0f);
  EXPECT_EQ(exp1(-88.0f), 0.0f);
  EXPECT_EQ(exp1(-1e30f), 0.0f);
  EXPECT_EQ(exp1(0.0f), 1.0f);
  EXPECT_EQ(exp1(-0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(exp1(std::nanf(""))));
  EXPECT_EQ(exp1(kInf), kInf);
  EXPECT_EQ(exp1(89.0f), kInf);
  EXPECT_GT(exp1(-87.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(exp1(88.0f)));
}

// The row helpers at every length up to three vectors and a tail, against plain loops: the tail
// lanes past n take no part and nothing past n is written.
TEST(VectorExpTest, RowHelpersAtEveryLength) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-20.0f, 5.0f);
  for (int64_t n = 1; n <= 3 * kLanes + 5; ++n) {
    SCOPED_TRACE(n);
    std::vector<float> x(n);
    for (float& v : x) v = dist(gen);
    x[n / 2] = 7.5f;
    float want_max = -kInf;
    double want_sum = 0.0;
    for (float v : x) want_max = std::max(want_max, v);
    for (float v : x) want_sum += std::exp(static_cast<double>(v) - want_max);
    EXPECT_EQ(max_of(x.data(), n), want_max);
    EXPECT_NEAR(exp_sum(x.data(), n, want_max), want_sum, 1e-6 * want_sum);

    std::vector<float> y(n + 1, 42.0f), z(n + 1, 42.0f);
    EXPECT_NEAR(exp_store(x.data(), n, want_max, y.data()), want_sum, 1e-6 * want_sum);
    exp_scale(x.data(), n, want_max, -0.5f, z.data());
    for (int64_t j = 0; j < n; ++j) {
      const double e = std::exp(static_cast<double>(x[j] - want_max));  // the float difference
      EXPECT_NEAR(y[j], e, 2e-7 * e + 1e-30) << j;
      EXPECT_EQ(z[j], y[j] * -0.5f) << j;
    }
    EXPECT_EQ(y[n], 42.0f);
    EXPECT_EQ(z[n], 42.0f);
  }
}

// max_of is NaN when any entry is, wherever it lies (the vector body, the tail); -inf for a row
// of -inf.
TEST(VectorExpTest, MaxOfANaNIsNaN) {
  for (int64_t n : {1, 15, 16, 17, 32, 33, 100}) {
    for (int64_t at = 0; at < n; at += std::max<int64_t>(1, n / 7)) {
      std::vector<float> x(n, 1.0f);
      x[at] = std::nanf("");
      EXPECT_TRUE(std::isnan(max_of(x.data(), n))) << n << " " << at;
    }
    const std::vector<float> neg(n, -kInf);
    EXPECT_EQ(max_of(neg.data(), n), -kInf);
  }
}

}  // namespace
}  // namespace dpe::host::vec
