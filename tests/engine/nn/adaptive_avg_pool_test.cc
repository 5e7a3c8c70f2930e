// AdaptiveAvgPool2d((1, 1)): PyTorch's repr, each plane's mean by hand, a backward equal to
// central finite differences, and errors for the sizes it does not build.
#include "engine/nn/adaptive_avg_pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/autograd/engine.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/ops.h"
#include "engine/core/error.h"
#include "engine/tensor/random.h"

namespace dpe {
namespace {

TEST(AdaptiveAvgPool2dTest, EachPlaneBecomesItsMean) {
  nn::AdaptiveAvgPool2d pool(1);
  EXPECT_EQ(pool.repr(), "AdaptiveAvgPool2d(output_size=(1, 1))");
  // [2, 2, 2, 3]: plane p holds p*6 + 0..5, mean p*6 + 2.5.
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = static_cast<float>(i);
  const Tensor y = pool(Tensor::from_vector(v, {2, 2, 2, 3}));
  EXPECT_EQ(y.shape(), Shape({2, 2, 1, 1}));
  const auto got = y.to_vector<float>();
  for (int p = 0; p < 4; ++p) EXPECT_NEAR(got[p], p * 6 + 2.5f, 1e-5) << p;
  // A 1x1 plane is its own mean; a 3-D input keeps its rank.
  EXPECT_EQ(pool(Tensor::from_vector(std::vector<float>{7, -1}, {1, 2, 1, 1})).to_vector<float>(),
            (std::vector<float>{7, -1}));
  EXPECT_EQ(pool(Tensor::from_vector(v, {4, 2, 3})).shape(), Shape({4, 1, 1}));
}

// <w, f(x)> in double, for the finite differences.
double project(const Tensor& y, const std::vector<float>& w) {
  const auto yv = y.to_vector<float>();
  double s = 0;
  for (size_t i = 0; i < yv.size(); ++i) s += static_cast<double>(yv[i]) * w[i];
  return s;
}

TEST(AdaptiveAvgPool2dTest, BackwardMatchesCentralDifferences) {
  nn::AdaptiveAvgPool2d pool;
  Generator gen(5);
  const Shape shape{2, 3, 3, 4};
  Tensor x = randn(shape, gen);
  x.requires_grad_(true);
  const Tensor y = pool(x);
  std::vector<float> w(static_cast<size_t>(y.numel()));
  for (float& e : w) e = gen.uniform(-1.0f, 1.0f);
  backward({y}, {Tensor::from_vector(w, y.shape())});
  const auto analytic = x.grad().to_vector<float>();

  NoGradGuard no_grad;
  const std::vector<float> base = x.to_vector<float>();
  const double h = 1e-2;
  for (size_t k = 0; k < base.size(); ++k) {
    std::vector<float> p = base, m = base;
    p[k] += static_cast<float>(h);
    m[k] -= static_cast<float>(h);
    const double numeric = (project(pool(Tensor::from_vector(p, shape)), w) -
                            project(pool(Tensor::from_vector(m, shape)), w)) /
                           (2 * h);
    EXPECT_NEAR(analytic[k], numeric, 1e-4) << "element " << k;
    // The pool's gradient is the output gradient spread evenly over the plane.
    EXPECT_NEAR(analytic[k], w[k / 12] / 12.0f, 1e-6) << "element " << k;
  }
}

// A 1x1 plane is its own mean, in a tensor of its own (as torch's): the output is a copy of x,
// and the gradient reaches x unchanged, channels last too.
TEST(AdaptiveAvgPool2dTest, OneByOnePlanesAreCopiedAndPassTheGradient) {
  nn::AdaptiveAvgPool2d pool;
  for (const MemoryFormat format : {MemoryFormat::kContiguous, MemoryFormat::kChannelsLast}) {
    Tensor x = Tensor::from_vector(std::vector<float>{3, -0.0f, 5, 2, 9, -4}, {3, 2, 1, 1})
                   .contiguous(format);
    x.requires_grad_(true);
    const Tensor y = pool(x);
    EXPECT_EQ(y.shape(), Shape({3, 2, 1, 1}));
    EXPECT_EQ(y.to_vector<float>(), x.to_vector<float>());
    EXPECT_NE(y.raw_data(), x.raw_data());
    const std::vector<float> g{0.5f, -1, 2, 0.25f, -3, 7};
    backward({y}, {Tensor::from_vector(g, y.shape())});
    EXPECT_EQ(x.grad().to_vector<float>(), g);
  }
}

TEST(AdaptiveAvgPool2dTest, OtherSizesAndBadInputsAreErrors) {
  try {
    nn::AdaptiveAvgPool2d pool(7);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("only output_size=(1, 1)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nn::AdaptiveAvgPool2d(1, 2), Error);
  nn::AdaptiveAvgPool2d pool;
  EXPECT_THROW(pool(Tensor::zeros({2, 3})), Error);
  EXPECT_THROW(pool(Tensor::zeros({1, 2, 0, 3})), Error);
}

}  // namespace
}  // namespace dpe
