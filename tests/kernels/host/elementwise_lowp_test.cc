// The 16-bit elementwise kernels (kernels/host/elementwise_lowp.h) against the float32 result of
// the same 16-bit inputs rounded once: each element exactly (add, mul, scale, relu and its
// gradient are one float32 operation, rounded to nearest even), and GELU within the float32
// kernel's own error plus the output's rounding.
#include "kernels/host/elementwise_lowp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/host/convert.h"
#include "kernels/host/gelu.h"

namespace dpe::host {
namespace {

class ElementwiseLowpTest : public testing::TestWithParam<DType> {
 protected:
  // n 16-bit words of dtype dt (zeros, negatives, a NaN and an infinity among them).
  std::vector<uint16_t> words(int64_t n, uint32_t seed) const {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> f(static_cast<size_t>(n));
    for (float& v : f) v = normal(gen);
    f[0] = 0.0f;
    f[1] = -0.0f;
    f[2] = std::nanf("");
    f[3] = INFINITY;
    std::vector<uint16_t> w(f.size());
    convert(w.data(), GetParam(), f.data(), DType::kFloat32, n);
    return w;
  }
  std::vector<float> wide(const std::vector<uint16_t>& w) const {
    std::vector<float> f(w.size());
    convert(f.data(), DType::kFloat32, w.data(), GetParam(), static_cast<int64_t>(w.size()));
    return f;
  }
  uint16_t narrow(float v) const {
    uint16_t w;
    convert(&w, GetParam(), &v, DType::kFloat32, 1);
    return w;
  }
};

TEST_P(ElementwiseLowpTest, EachElementIsTheFloat32OperationRoundedOnce) {
  const DType dt = GetParam();
  HostContext ctx;
  const int64_t n = 70000;  // past the parallel grain
  const std::vector<uint16_t> a = words(n, 1), b = words(n, 2);
  const std::vector<float> fa = wide(a), fb = wide(b);
  std::vector<uint16_t> add(a.size()), mul(a.size()), scale(a.size()), relu(a.size()),
      relu_g(a.size());
  add_lowp(ctx, dt, a.data(), b.data(), -0.5f, add.data(), n);
  mul_lowp(ctx, dt, a.data(), b.data(), mul.data(), n);
  scale_lowp(ctx, dt, a.data(), 0.125f, scale.data(), n);
  relu_forward_lowp(ctx, dt, a.data(), relu.data(), n);
  relu_backward_lowp(ctx, dt, a.data(), b.data(), relu_g.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(fa[i]) || std::isnan(fb[i])) continue;
    ASSERT_EQ(add[i], narrow(fa[i] + -0.5f * fb[i])) << i;
    ASSERT_EQ(mul[i], narrow(fa[i] * fb[i])) << i;
    ASSERT_EQ(scale[i], narrow(fa[i] * 0.125f)) << i;
    ASSERT_EQ(relu[i], narrow(fa[i] > 0.0f ? fa[i] : 0.0f)) << i;
    ASSERT_EQ(relu_g[i], narrow(fa[i] > 0.0f ? fb[i] : 0.0f)) << i;
  }
  EXPECT_EQ(relu[2], 0);  // NaN, as the float32 kernel's x > 0 ? x : 0
}

TEST_P(ElementwiseLowpTest, GeluIsTheFloat32KernelRoundedOnce) {
  const DType dt = GetParam();
  HostContext ctx;
  const int64_t n = 1000;
  std::vector<uint16_t> x = words(n, 3), g = words(n, 4);
  x[2] = g[2] = 0;  // no NaN here: the reference below is the float32 kernel itself
  std::vector<float> fx = wide(x), fg = wide(g), y32(fx.size()), gx32(fx.size());
  gelu_forward(ctx, fx.data(), y32.data(), n);
  gelu_backward(ctx, fx.data(), fg.data(), gx32.data(), n);
  std::vector<uint16_t> y(x.size()), gx(x.size());
  gelu_forward_lowp(ctx, dt, x.data(), y.data(), n);
  gelu_backward_lowp(ctx, dt, x.data(), g.data(), gx.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (std::isinf(fx[i])) continue;
    ASSERT_EQ(y[i], narrow(y32[i])) << i;
    ASSERT_EQ(gx[i], narrow(gx32[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, ElementwiseLowpTest,
                         testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dpe::host
