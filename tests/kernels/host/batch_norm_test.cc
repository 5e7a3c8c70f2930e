#include "kernels/host/batch_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/host/elementwise.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

class BatchNormTest : public ::testing::TestWithParam<BatchNormShape> {};

// The channel of flat element k.
int64_t channel_of(const BatchNormShape& sh, int64_t k) {
  return sh.channels_last ? k % sh.c : (k / sh.s) % sh.c;
}

TEST_P(BatchNormTest, TrainEvalAndBackwardMatchReference) {
  const BatchNormShape sh = GetParam();
  HostContext ctx;
  const int64_t total = sh.n * sh.c * sh.s, m = sh.n * sh.s;
  const float eps = 1e-5f;
  auto x = random_floats(total, 1, -2.0f, 3.0f);
  const auto gamma = random_floats(sh.c, 2, 0.5f, 1.5f), beta = random_floats(sh.c, 3);
  const auto gy = random_floats(total, 4);
  // Element (i, ch, j) of [N, C, S], or of [N, S, C] when channels last.
  auto at = [&](int64_t i, int64_t ch, int64_t j) {
    return sh.channels_last ? (i * sh.s + j) * sh.c + ch : (i * sh.c + ch) * sh.s + j;
  };

  std::vector<double> mean(sh.c, 0.0), var(sh.c, 0.0), y(total), gx(total), gg(sh.c, 0.0),
      gb(sh.c, 0.0), y_eval(total);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) mean[ch] += x[at(i, ch, j)];
    }
    mean[ch] /= m;
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) var[ch] += std::pow(x[at(i, ch, j)] - mean[ch], 2);
    }
    var[ch] /= m;  // biased, as torch normalises with
    const double invstd = 1.0 / std::sqrt(var[ch] + eps);
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) {
        const int64_t k = at(i, ch, j);
        const double xhat = (x[k] - mean[ch]) * invstd;
        y[k] = xhat * gamma[ch] + beta[ch];
        gb[ch] += gy[k];
        gg[ch] += gy[k] * xhat;
      }
    }
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) {
        const int64_t k = at(i, ch, j);
        const double xhat = (x[k] - mean[ch]) * invstd;
        gx[k] = gamma[ch] * invstd / m * (m * gy[k] - gb[ch] - xhat * gg[ch]);
      }
    }
  }

  std::vector<float> got_y(total), got_mean(sh.c), got_var(sh.c);
  batch_norm_forward_train(ctx, sh, x.data(), gamma.data(), beta.data(), eps, got_y.data(),
                           got_mean.data(), got_var.data());
  expect_close(y, got_y, 1e-4, 1e-4, "batch_norm y");
  expect_close(mean, got_mean, 1e-5, 1e-5, "batch_norm mean");
  expect_close(var, got_var, 1e-4, 1e-5, "batch_norm var");

  std::vector<float> got_gx(total), got_gg(sh.c), got_gb(sh.c);
  batch_norm_backward(ctx, sh, x.data(), gy.data(), gamma.data(), got_mean.data(), got_var.data(),
                      eps, got_gx.data(), got_gg.data(), got_gb.data());
  expect_close(gx, got_gx, 1e-3, 1e-4, "batch_norm gx");
  expect_close(gg, got_gg, 1e-4, 1e-4, "batch_norm ggamma");
  expect_close(gb, got_gb, 1e-5, 1e-5, "batch_norm gbeta");

  // Evaluation with given statistics (here: other ones than the batch's).
  const auto rm = random_floats(sh.c, 5), rv = random_floats(sh.c, 6, 0.5f, 2.0f);
  for (int64_t k = 0; k < total; ++k) {
    const int64_t ch = channel_of(sh, k);
    y_eval[k] = (x[k] - rm[ch]) / std::sqrt(double(rv[ch]) + eps) * gamma[ch] + beta[ch];
  }
  batch_norm_forward_eval(ctx, sh, x.data(), gamma.data(), beta.data(), rm.data(), rv.data(), eps,
                          got_y.data());
  expect_close(y_eval, got_y, 1e-4, 1e-4, "batch_norm eval y");

  // affine=False: gamma 1, beta 0.
  batch_norm_forward_eval(ctx, sh, x.data(), nullptr, nullptr, rm.data(), rv.data(), eps,
                          got_y.data());
  for (int64_t k = 0; k < total; ++k) {
    const int64_t ch = channel_of(sh, k);
    y_eval[k] = (x[k] - rm[ch]) / std::sqrt(double(rv[ch]) + eps);
  }
  expect_close(y_eval, got_y, 1e-4, 1e-4, "batch_norm eval y without affine");
}

TEST_P(BatchNormTest, SyncBuildingBlocksMatchReference) {
  const BatchNormShape sh = GetParam();
  HostContext ctx;
  const int64_t total = sh.n * sh.c * sh.s;
  const auto x = random_floats(total, 7), gy = random_floats(total, 8);
  const auto mean = random_floats(sh.c, 9), invstd = random_floats(sh.c, 10, 0.5f, 2.0f);
  const auto gamma = random_floats(sh.c, 11), beta = random_floats(sh.c, 12);
  const auto mg = random_floats(sh.c, 13), mgx = random_floats(sh.c, 14);
  std::vector<double> y(total), gx(total);
  for (int64_t k = 0; k < total; ++k) {
    const int64_t ch = channel_of(sh, k);
    y[k] = (double(x[k]) - mean[ch]) * invstd[ch] * gamma[ch] + beta[ch];
    gx[k] = (double(gy[k]) - mg[ch] -
             (double(x[k]) - mean[ch]) * double(invstd[ch]) * invstd[ch] * mgx[ch]) *
            invstd[ch] * gamma[ch];
  }
  std::vector<float> got(total);
  batch_norm_apply(ctx, sh, x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(),
                   got.data());
  expect_close(y, got, 1e-5, 1e-5, "batch_norm_apply");
  batch_norm_backward_elemt(ctx, sh, x.data(), gy.data(), mean.data(), invstd.data(), gamma.data(),
                            mg.data(), mgx.data(), got.data());
  expect_close(gx, got, 1e-5, 1e-5, "batch_norm_backward_elemt");
}

// Inputs of a fused kernel's test: random x, gy and parameters (seeds from `seed` on).
struct FusedCase {
  BatchNormShape sh;
  int64_t total;
  std::vector<float> x, gy, gamma, beta;
  FusedCase(const BatchNormShape& shape, uint32_t seed)
      : sh(shape),
        total(shape.n * shape.c * shape.s),
        x(random_floats(total, seed, -2.0f, 3.0f)),
        gy(random_floats(total, seed + 1)),
        gamma(random_floats(shape.c, seed + 2, -1.5f, 1.5f)),
        beta(random_floats(shape.c, seed + 3)) {}
  // f(gamma, beta) with the parameters, then without them (affine=False: null).
  template <class F>
  void with_and_without_affine(const F& f) const {
    for (const bool affine : {true, false}) {
      SCOPED_TRACE(affine ? "affine" : "affine=False");
      f(affine ? gamma.data() : nullptr, affine ? beta.data() : nullptr);
    }
  }
};

// Equal as bits, NaN included.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Not a vacuous comparison of a ReLU's outputs: some are clipped and some are not (two values may
// not be).
void expect_clipped_and_not(const std::vector<float>& y) {
  const auto zeros = std::count(y.begin(), y.end(), 0.0f);
  if (y.size() > 2) {
    EXPECT_GT(zeros, 0);
    EXPECT_LT(zeros, static_cast<int64_t>(y.size()));
  }
}

// The fused BatchNorm2d + ReLU gives bit for bit what the two kernels give one after the other:
// y = max(batch_norm(x), 0), and the backward of batch norm fed relu_backward's gradient
// (gy where y > 0). With and without affine parameters; about half the outputs are clipped.
TEST_P(BatchNormTest, FusedReluIsTheReluOfTheUnfused) {
  HostContext ctx;
  const FusedCase in(GetParam(), 21);
  const BatchNormShape& sh = in.sh;
  const int64_t total = in.total;
  const float eps = 1e-5f;
  in.with_and_without_affine([&](const float* g, const float* b) {
    std::vector<float> y(total), mean(sh.c), var(sh.c), masked(total);
    batch_norm_forward_train(ctx, sh, in.x.data(), g, b, eps, y.data(), mean.data(), var.data());
    for (int64_t k = 0; k < total; ++k) y[k] = y[k] < 0.0f ? 0.0f : y[k];
    for (int64_t k = 0; k < total; ++k) masked[k] = y[k] > 0.0f ? in.gy[k] : 0.0f;
    std::vector<float> gx(total), gg(sh.c), gb(sh.c);
    batch_norm_backward(ctx, sh, in.x.data(), masked.data(), g, mean.data(), var.data(), eps,
                        gx.data(), gg.data(), gb.data());

    std::vector<float> fy(total), fmean(sh.c), fvar(sh.c);
    batch_norm_forward_train(ctx, sh, in.x.data(), g, b, eps, fy.data(), fmean.data(), fvar.data(),
                             /*relu=*/true);
    EXPECT_EQ(fy, y);
    EXPECT_EQ(fmean, mean);
    EXPECT_EQ(fvar, var);
    std::vector<float> fgx(total), fgg(sh.c), fgb(sh.c);
    batch_norm_relu_backward(ctx, sh, in.x.data(), in.gy.data(), g, b, mean.data(), var.data(), eps,
                             fgx.data(), fgg.data(), fgb.data());
    EXPECT_EQ(fgx, gx);
    EXPECT_EQ(fgg, gg);
    EXPECT_EQ(fgb, gb);
    expect_clipped_and_not(y);
  });
}

// The end of a ResNet block fused, max(batch_norm(x) + residual, 0) and its gradients, is bit for
// bit the three kernels apart: batch_norm_forward_train, add_forward, relu_forward, then
// relu_backward (whose result is the residual's gradient) and batch_norm_backward. The residual
// puts some sums exactly at 0 (the mask's edge) and one NaN among them.
TEST_P(BatchNormTest, FusedAddReluIsTheOpsApart) {
  HostContext ctx;
  const FusedCase in(GetParam(), 41);
  const BatchNormShape& sh = in.sh;
  const int64_t total = in.total;
  const float eps = 1e-5f;
  in.with_and_without_affine([&](const float* g, const float* b) {
    std::vector<float> h(total), mean(sh.c), var(sh.c);
    batch_norm_forward_train(ctx, sh, in.x.data(), g, b, eps, h.data(), mean.data(), var.data());
    auto residual = random_floats(total, 45, -1.0f, 1.0f);
    for (int64_t k = 0; k < total; k += 3) residual[k] = -h[k];  // sums of exactly 0
    if (total > 4) residual[4] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> sum(total), y(total), gr(total), gx(total), gg(sh.c), gb(sh.c);
    add_forward(ctx, h.data(), residual.data(), 1.0f, sum.data(), total);
    relu_forward(ctx, sum.data(), y.data(), total);
    relu_backward(ctx, y.data(), in.gy.data(), gr.data(), total);
    batch_norm_backward(ctx, sh, in.x.data(), gr.data(), g, mean.data(), var.data(), eps, gx.data(),
                        gg.data(), gb.data());

    std::vector<float> fy(total), fmean(sh.c), fvar(sh.c);
    batch_norm_add_relu_forward(ctx, sh, in.x.data(), residual.data(), g, b, eps, fy.data(),
                                fmean.data(), fvar.data());
    std::vector<float> fgx(total), fgr(total), fgg(sh.c), fgb(sh.c);
    batch_norm_add_relu_backward(ctx, sh, in.x.data(), fy.data(), in.gy.data(), g, fmean.data(),
                                 fvar.data(), eps, fgx.data(), fgr.data(), fgg.data(), fgb.data());
    EXPECT_TRUE(same_bits(fy, y));
    EXPECT_EQ(fmean, mean);
    EXPECT_EQ(fvar, var);
    EXPECT_TRUE(same_bits(fgr, gr));
    EXPECT_TRUE(same_bits(fgx, gx));
    EXPECT_EQ(fgg, gg);
    EXPECT_EQ(fgb, gb);
    expect_clipped_and_not(y);
  });
}

// Where the normalised value is a rounding residual (an element equal to a mean that is not a
// power of two) its sign is the evaluation's, and the backward's mask must be the forward's; a NaN
// stays NaN forward and its gradient is masked, as relu and relu_backward do. Channel 0 holds the
// NaN (its statistics are NaN), the others the values at their means.
TEST(BatchNormFusedReluTest, MaskAtTheMeanAndNaNAreTheUnfusedOnes) {
  HostContext ctx;
  const BatchNormShape sh{3, 4, 2};
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // [n][c][s]: per channel, n = 0, 1, 2 at mean - d, mean, mean + d.
  const float means[4] = {1.0f, 3.0f, 0.2f, 1.1f}, spreads[4] = {0.5f, 1.0f, 0.1f, 0.1f};
  std::vector<float> x(sh.n * sh.c * sh.s);
  for (int64_t i = 0; i < sh.n; ++i) {
    for (int64_t ch = 0; ch < sh.c; ++ch) {
      for (int64_t j = 0; j < sh.s; ++j) {
        x[(i * sh.c + ch) * sh.s + j] = means[ch] + static_cast<float>(i - 1) * spreads[ch];
      }
    }
  }
  x[1] = nan;
  const auto gy = random_floats(static_cast<int64_t>(x.size()), 31);
  const int64_t total = static_cast<int64_t>(x.size());
  std::vector<float> y(total), mean(sh.c), var(sh.c), masked(total), gx(total), gg(sh.c), gb(sh.c);
  batch_norm_forward_train(ctx, sh, x.data(), nullptr, nullptr, 1e-5f, y.data(), mean.data(),
                           var.data());
  for (float& v : y) v = v < 0.0f ? 0.0f : v;
  for (int64_t k = 0; k < total; ++k) masked[k] = y[k] > 0.0f ? gy[k] : 0.0f;
  batch_norm_backward(ctx, sh, x.data(), masked.data(), nullptr, mean.data(), var.data(), 1e-5f,
                      gx.data(), gg.data(), gb.data());
  std::vector<float> fy(total), fgx(total), fgg(sh.c), fgb(sh.c);
  batch_norm_forward_train(ctx, sh, x.data(), nullptr, nullptr, 1e-5f, fy.data(), mean.data(),
                           var.data(), /*relu=*/true);
  batch_norm_relu_backward(ctx, sh, x.data(), gy.data(), nullptr, nullptr, mean.data(), var.data(),
                           1e-5f, fgx.data(), fgg.data(), fgb.data());
  EXPECT_TRUE(same_bits(fy, y));
  EXPECT_TRUE(same_bits(fgx, gx));
  EXPECT_TRUE(same_bits(fgg, gg));
  EXPECT_TRUE(same_bits(fgb, gb));
  EXPECT_TRUE(std::isnan(fy[1]));
  EXPECT_FALSE(std::isnan(fy[sh.s]));  // channel 1 keeps finite values
}

// Statistics of activations far from 0 relative to their spread: E[x^2] - E[x]^2 in float would
// lose the variance entirely (1e4^2 against 1); the plane-wise merge keeps it.
TEST(BatchNormStatsTest, VarianceOfALargeOffsetIsExact) {
  HostContext ctx;
  const BatchNormShape sh{64, 3, 49};
  const int64_t total = sh.n * sh.c * sh.s;
  auto x = random_floats(total, 11, -1.0f, 1.0f);
  for (float& v : x) v += 1e4f;
  std::vector<double> want_mean(sh.c), want_var(sh.c);
  for (int64_t ch = 0; ch < sh.c; ++ch) {
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) want_mean[ch] += x[(i * sh.c + ch) * sh.s + j];
    }
    want_mean[ch] /= sh.n * sh.s;
    for (int64_t i = 0; i < sh.n; ++i) {
      for (int64_t j = 0; j < sh.s; ++j) {
        want_var[ch] += std::pow(x[(i * sh.c + ch) * sh.s + j] - want_mean[ch], 2);
      }
    }
    want_var[ch] /= sh.n * sh.s;  // about 1/3
  }
  std::vector<float> y(total), mean(sh.c), var(sh.c);
  batch_norm_forward_train(ctx, sh, x.data(), nullptr, nullptr, 1e-5f, y.data(), mean.data(),
                           var.data());
  expect_close(want_mean, mean, 1e-6, 0, "mean");
  expect_close(want_var, var, 1e-3, 0, "var");
}

// Channels last, a row of whole vectors (or half of one, two rows a register) keeps the sums down
// the rows in registers, any other channel count in memory: the same adds in the same order, so a
// channel's results are bit for bit the same either way. 16 channels run in registers with 8 or
// 16 lanes, 8 channels two rows a register with 16; the same channels with one more beside them
// run in memory. Row counts leave every tail of the four chains (and an odd last row of a pair).
TEST(BatchNormChannelsLastTest, SumsInRegistersAreTheSumsInMemory) {
  HostContext ctx;
  const float eps = 1e-5f;
  for (const int64_t c : {8, 16}) {
    for (const int64_t s : {32, 33, 34, 35}) {
      for (const bool relu : {false, true}) {
        SCOPED_TRACE("c " + std::to_string(c) + " s " + std::to_string(s) + (relu ? " relu" : ""));
        const BatchNormShape vectors{3, c, s, true}, odd{3, c + 1, s, true};
        const int64_t total = vectors.n * vectors.s * vectors.c;
        const auto x = random_floats(total, 31, -2.0f, 3.0f), gy = random_floats(total, 32);
        const auto gamma = random_floats(c + 1, 33, -1.5f, 1.5f), beta = random_floats(c + 1, 34);
        // The c channels of each row with one more after them.
        const auto widen = [&](const std::vector<float>& v, float extra) {
          std::vector<float> w;
          for (int64_t r = 0; r < total / c; ++r) {
            w.insert(w.end(), v.begin() + r * c, v.begin() + (r + 1) * c);
            w.push_back(extra);
          }
          return w;
        };
        struct Outputs {
          std::vector<float> y, gx;                     // per element
          std::vector<float> mean, var, ggamma, gbeta;  // per channel
        };
        const auto run = [&](const BatchNormShape& sh, const std::vector<float>& xs,
                             const std::vector<float>& gys) {
          const size_t all = xs.size(), channels = static_cast<size_t>(sh.c);
          Outputs o{std::vector<float>(all),      std::vector<float>(all),
                    std::vector<float>(channels), std::vector<float>(channels),
                    std::vector<float>(channels), std::vector<float>(channels)};
          batch_norm_forward_train(ctx, sh, xs.data(), gamma.data(), beta.data(), eps, o.y.data(),
                                   o.mean.data(), o.var.data(), relu);
          if (relu) {
            batch_norm_relu_backward(ctx, sh, xs.data(), gys.data(), gamma.data(), beta.data(),
                                     o.mean.data(), o.var.data(), eps, o.gx.data(), o.ggamma.data(),
                                     o.gbeta.data());
          } else {
            batch_norm_backward(ctx, sh, xs.data(), gys.data(), gamma.data(), o.mean.data(),
                                o.var.data(), eps, o.gx.data(), o.ggamma.data(), o.gbeta.data());
          }
          return o;
        };
        const auto in_registers = run(vectors, x, gy);
        const auto in_memory = run(odd, widen(x, 0.25f), widen(gy, -0.5f));
        EXPECT_EQ(widen(in_registers.y, in_memory.y[c]), in_memory.y);
        EXPECT_EQ(widen(in_registers.gx, in_memory.gx[c]), in_memory.gx);
        const auto first_c = [&](const std::vector<float>& v) {
          return std::vector<float>(v.begin(), v.begin() + c);
        };
        EXPECT_EQ(in_registers.mean, first_c(in_memory.mean));
        EXPECT_EQ(in_registers.var, first_c(in_memory.var));
        EXPECT_EQ(in_registers.ggamma, first_c(in_memory.ggamma));
        EXPECT_EQ(in_registers.gbeta, first_c(in_memory.gbeta));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest,
                         ::testing::Values(BatchNormShape{2, 1, 1},     // [2, 1]
                                           BatchNormShape{7, 3, 1},     // [N, C] (BatchNorm1d)
                                           BatchNormShape{3, 5, 35},    // odd [N, C, 5, 7]
                                           BatchNormShape{4, 16, 784},  // the ConvNet's first
                                           BatchNormShape{5, 32, 196},
                                           BatchNormShape{3, 130, 90},  // 3 channel blocks
                                           // channels last ([N, H, W, C])
                                           BatchNormShape{3, 5, 35, true},
                                           BatchNormShape{3, 4, 35, true},  // half a vector
                                           BatchNormShape{3, 8, 49, true},  // (8 or 16 lanes)
                                           BatchNormShape{4, 16, 784, true},
                                           BatchNormShape{5, 32, 196, true},
                                           BatchNormShape{3, 130, 90, true},
                                           BatchNormShape{5, 64, 16, true}));

}  // namespace
}  // namespace dpe::host
