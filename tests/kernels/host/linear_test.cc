#include "kernels/host/linear.h"

#include <gtest/gtest.h>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

class LinearTest : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearTest, ForwardAndBackwardMatchReference) {
  const LinearShape s = GetParam();
  HostContext ctx;
  const auto x = random_floats(s.batch * s.in, 1), w = random_floats(s.out * s.in, 2);
  const auto b = random_floats(s.out, 3), gy = random_floats(s.batch * s.out, 4);

  std::vector<double> want_y(s.batch * s.out), want_gx(s.batch * s.in, 0.0),
      want_gw(s.out * s.in, 0.0), want_gb(s.out, 0.0);
  for (int64_t r = 0; r < s.batch; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      double acc = b[o];
      for (int64_t i = 0; i < s.in; ++i) acc += double(x[r * s.in + i]) * w[o * s.in + i];
      want_y[r * s.out + o] = acc;
      const double g = gy[r * s.out + o];
      want_gb[o] += g;
      for (int64_t i = 0; i < s.in; ++i) {
        want_gx[r * s.in + i] += g * w[o * s.in + i];
        want_gw[o * s.in + i] += g * x[r * s.in + i];
      }
    }
  }

  std::vector<float> y(s.batch * s.out);
  linear_forward(ctx, s, x.data(), w.data(), b.data(), y.data());
  expect_close(want_y, y, 1e-5, 1e-5, "linear y");

  linear_forward(ctx, s, x.data(), w.data(), nullptr, y.data());
  for (int64_t r = 0; r < s.batch; ++r) {
    for (int64_t o = 0; o < s.out; ++o) want_y[r * s.out + o] -= b[o];
  }
  expect_close(want_y, y, 1e-5, 1e-5, "linear y without bias");

  std::vector<float> gx(s.batch * s.in), gw(s.out * s.in), gb(s.out);
  linear_backward(ctx, s, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data());
  expect_close(want_gx, gx, 1e-5, 1e-5, "linear gx");
  expect_close(want_gw, gw, 1e-5, 1e-5, "linear gw");
  expect_close(want_gb, gb, 1e-5, 1e-5, "linear gb");

  // Gradients not asked for are left alone.
  std::vector<float> gw2(s.out * s.in, 7.0f);
  linear_backward(ctx, s, x.data(), w.data(), gy.data(), nullptr, gw2.data(), nullptr);
  expect_close(want_gw, gw2, 1e-5, 1e-5, "linear gw only");

  // param_grad_scale multiplies the parameters' gradients, not the input's.
  linear_backward(ctx, s, x.data(), w.data(), gy.data(), gx.data(), gw.data(), gb.data(), 0.25f);
  for (double& v : want_gw) v *= 0.25;
  for (double& v : want_gb) v *= 0.25;
  expect_close(want_gx, gx, 1e-5, 1e-5, "scaled linear gx");
  expect_close(want_gw, gw, 1e-5, 1e-5, "scaled linear gw");
  expect_close(want_gb, gb, 1e-5, 1e-5, "scaled linear gb");

  // The weight stored [in, out] (w_transposed, GPT-2's Conv1D): the same products, gw [in, out].
  LinearShape st = s;
  st.w_transposed = true;
  std::vector<float> wt(s.in * s.out);
  std::vector<double> want_gwt(s.in * s.out);
  for (int64_t o = 0; o < s.out; ++o) {
    for (int64_t i = 0; i < s.in; ++i) {
      wt[i * s.out + o] = w[o * s.in + i];
      want_gwt[i * s.out + o] = want_gw[o * s.in + i] / 0.25;
    }
  }
  linear_forward(ctx, st, x.data(), wt.data(), nullptr, y.data());
  expect_close(want_y, y, 1e-5, 1e-5, "linear y, weight [in, out]");
  std::vector<float> gwt(s.in * s.out);
  linear_backward(ctx, st, x.data(), wt.data(), gy.data(), gx.data(), gwt.data(), nullptr);
  expect_close(want_gx, gx, 1e-5, 1e-5, "linear gx, weight [in, out]");
  expect_close(want_gwt, gwt, 1e-5, 1e-5, "linear gw [in, out]");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinearShape{1, 1, 1}, LinearShape{5, 3, 4},
                                           LinearShape{33, 17, 10}, LinearShape{64, 784, 31},
                                           // the weight's gradient in blocks of output rows
                                           LinearShape{7, 5, 2500}));

}  // namespace
}  // namespace dpe::host
