#include "kernels/host/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(LayerNormTest, ForwardAndBackwardMatchReference) {
  HostContext ctx;
  const float eps = 1e-5f;
  for (LayerNormShape s : {LayerNormShape{1, 1}, LayerNormShape{3, 7}, LayerNormShape{64, 768},
                           LayerNormShape{5, 130}}) {
    const int64_t n = s.rows * s.cols;
    const auto x = random_floats(n, 1, -3.0f, 5.0f);
    const auto gamma = random_floats(s.cols, 2, 0.5f, 1.5f);
    const auto beta = random_floats(s.cols, 3);
    const auto gy = random_floats(n, 4);
    // Reference in double: y, and the gradients of sum(gy * y) by the textbook formulas.
    std::vector<double> y(n), gx(n), gg(s.cols, 0.0), gb(s.cols, 0.0), mean(s.rows), rstd(s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      double mu = 0, var = 0;
      for (int64_t j = 0; j < s.cols; ++j) mu += x[r * s.cols + j];
      mu /= s.cols;
      for (int64_t j = 0; j < s.cols; ++j) var += std::pow(x[r * s.cols + j] - mu, 2);
      const double rs = 1.0 / std::sqrt(var / s.cols + eps);
      mean[r] = mu;
      rstd[r] = rs;
      double a = 0, b = 0;
      for (int64_t j = 0; j < s.cols; ++j) {
        const int64_t i = r * s.cols + j;
        const double xh = (x[i] - mu) * rs;
        y[i] = xh * gamma[j] + beta[j];
        gg[j] += gy[i] * xh;
        gb[j] += gy[i];
        a += gy[i] * gamma[j];
        b += gy[i] * gamma[j] * xh;
      }
      for (int64_t j = 0; j < s.cols; ++j) {
        const int64_t i = r * s.cols + j;
        const double xh = (x[i] - mu) * rs;
        gx[i] = rs * (gy[i] * gamma[j] - a / s.cols - xh * b / s.cols);
      }
    }
    std::vector<float> got_y(n), got_mean(s.rows), got_rstd(s.rows);
    layer_norm_forward(ctx, s, x.data(), gamma.data(), beta.data(), eps, got_y.data(),
                       got_mean.data(), got_rstd.data());
    expect_close(y, got_y, 1e-4, 1e-5, "layer_norm y");
    expect_close(mean, got_mean, 1e-5, 1e-6, "layer_norm mean");
    expect_close(rstd, got_rstd, 1e-4, 1e-6, "layer_norm rstd");
    std::vector<float> got_gx(n), got_gg(s.cols), got_gb(s.cols);
    layer_norm_backward(ctx, s, x.data(), gy.data(), gamma.data(), got_mean.data(),
                        got_rstd.data(), got_gx.data(), got_gg.data(), got_gb.data());
    expect_close(gx, got_gx, 1e-3, 1e-4, "layer_norm gx");
    expect_close(gg, got_gg, 1e-4, 1e-4, "layer_norm ggamma");
    expect_close(gb, got_gb, 1e-5, 1e-5, "layer_norm gbeta");

    // Without affine parameters: gamma 1, beta 0; the parameter gradients are not wanted.
    std::vector<double> y_plain(n);
    for (int64_t i = 0; i < n; ++i) y_plain[i] = (y[i] - beta[i % s.cols]) / gamma[i % s.cols];
    layer_norm_forward(ctx, s, x.data(), nullptr, nullptr, eps, got_y.data(), got_mean.data(),
                       got_rstd.data());
    expect_close(y_plain, got_y, 1e-4, 1e-5, "layer_norm y without affine");
    layer_norm_backward(ctx, s, x.data(), gy.data(), nullptr, got_mean.data(), got_rstd.data(),
                        got_gx.data(), nullptr, nullptr);
    std::vector<double> gx_plain(n);  // the formula above with gamma 1
    for (int64_t r = 0; r < s.rows; ++r) {
      double a = 0, b = 0;
      for (int64_t j = 0; j < s.cols; ++j) {
        const int64_t i = r * s.cols + j;
        a += gy[i];
        b += gy[i] * (x[i] - mean[r]) * rstd[r];
      }
      for (int64_t j = 0; j < s.cols; ++j) {
        const int64_t i = r * s.cols + j;
        gx_plain[i] = rstd[r] * (gy[i] - a / s.cols - (x[i] - mean[r]) * rstd[r] * b / s.cols);
      }
    }
    expect_close(gx_plain, got_gx, 1e-3, 1e-4, "layer_norm gx without affine");

    // One affine parameter without the other (ops::layer_norm allows either).
    std::vector<double> y_gamma(n), y_beta(n);
    for (int64_t i = 0; i < n; ++i) {
      y_gamma[i] = y[i] - beta[i % s.cols];
      y_beta[i] = y_plain[i] + beta[i % s.cols];
    }
    layer_norm_forward(ctx, s, x.data(), gamma.data(), nullptr, eps, got_y.data(), got_mean.data(),
                       got_rstd.data());
    expect_close(y_gamma, got_y, 1e-4, 1e-5, "layer_norm y with gamma only");
    layer_norm_forward(ctx, s, x.data(), nullptr, beta.data(), eps, got_y.data(), got_mean.data(),
                       got_rstd.data());
    expect_close(y_beta, got_y, 1e-4, 1e-5, "layer_norm y with beta only");
  }
}

}  // namespace
}  // namespace dpe::host
