#include "kernels/host/batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/host/batch_norm_relu.h"
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
  batch_norm_elemt(ctx, sh, x.data(), mean.data(), invstd.data(), gamma.data(), beta.data(),
                   got.data());
  expect_close(y, got, 1e-5, 1e-5, "batch_norm_elemt");
  batch_norm_backward_elemt(ctx, sh, x.data(), gy.data(), mean.data(), invstd.data(), gamma.data(),
                            mg.data(), mgx.data(), got.data());
  expect_close(gx, got, 1e-5, 1e-5, "batch_norm_backward_elemt");
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
          if (relu) {
            batch_norm_relu_forward(ctx, sh, xs.data(), gamma.data(), beta.data(), eps, o.y.data(),
                                    o.mean.data(), o.var.data());
            batch_norm_relu_backward(ctx, sh, xs.data(), gys.data(), gamma.data(), beta.data(),
                                     o.mean.data(), o.var.data(), eps, o.gx.data(), o.ggamma.data(),
                                     o.gbeta.data());
          } else {
            batch_norm_forward_train(ctx, sh, xs.data(), gamma.data(), beta.data(), eps, o.y.data(),
                                     o.mean.data(), o.var.data());
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

INSTANTIATE_TEST_SUITE_P(Shapes, BatchNormTest, ::testing::ValuesIn(testing::batch_norm_shapes()));

}  // namespace
}  // namespace dpe::host
