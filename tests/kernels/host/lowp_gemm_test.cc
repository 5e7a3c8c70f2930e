// The 16-bit matrix products (kernels/host/lowp_gemm.h, linear_lowp.h) against a float64
// reference computed from the same 16-bit inputs. Tolerance: the output's own rounding (half an
// ulp of the dtype, 2^-9 relative for bfloat16, 2^-12 for float16, doubled) plus float32
// accumulation over k products (k * 2^-23 of the sum of |a||b|, doubled). float16 runs emulated
// in float32 (oneDNN 2.6 has no CPU kernel for it), bfloat16 on AMX where the CPU has it: both
// paths are held to the same bound.
#include "kernels/host/lowp_gemm.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <vector>

#include "kernels/host/convert.h"
#include "kernels/host/linear_lowp.h"
#include "tests/kernels/host/lowp_test_util.h"

namespace dpe::host {
namespace {

using lowp_testing::random_values;
using lowp_testing::Values;
using lowp_testing::widen;

// got[i, j] against ref = sum_p a(i, p) b(p, j) (+ bias), with the bound above.
void expect_close(DType dt, const std::vector<double>& got, const std::vector<double>& ref,
                  const std::vector<double>& abs_sum, int64_t k, const char* what) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_LE(std::fabs(got[i] - ref[i]), lowp_testing::bound(dt, ref[i], abs_sum[i], k))
        << what << " element " << i;
  }
}

class LowpGemmTest : public testing::TestWithParam<DType> {};

TEST_P(LowpGemmTest, EveryTransposeWithBiasAndScaleMatchesFloat64) {
  const DType dt = GetParam();
  HostContext ctx;
  const int64_t m = 37, n = 29, k = 70;
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    const Values a = random_values(dt, m * k, 1 + t), b = random_values(dt, k * n, 11 + t);
    const Values bias = random_values(dt, n, 21 + t);
    LowpGemm g;
    g.in = g.out = dt;
    g.trans_a = ta;
    g.trans_b = tb;
    g.m = m;
    g.n = n;
    g.k = k;
    g.lda = ta ? m : k;
    g.ldb = tb ? k : n;
    g.ldc = n;
    g.alpha = t == 3 ? 0.5f : 1.0f;
    std::vector<uint16_t> c(static_cast<size_t>(m * n));
    lowp_gemm(ctx, g, a.raw.data(), b.raw.data(), bias.raw.data(), c.data());
    std::vector<double> ref(c.size()), abs_sum(c.size());
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = a.exact[ta ? p * m + i : i * k + p];
          const double y = b.exact[tb ? j * k + p : p * n + j];
          s += x * y;
          sa += std::fabs(x * y);
        }
        ref[i * n + j] = g.alpha * (s + bias.exact[j]);
        abs_sum[i * n + j] = sa + std::fabs(bias.exact[j]);
      }
    }
    expect_close(dt, widen(dt, c), ref, abs_sum, k, ta ? (tb ? "TT" : "TN") : (tb ? "NT" : "NN"));
  }
}

TEST_P(LowpGemmTest, LinearBackwardMatchesFloat64) {
  const DType dt = GetParam();
  HostContext ctx;
  const LinearShape s{16, 24, 8, false};
  const Values x = random_values(dt, s.batch * s.in, 3), w = random_values(dt, s.out * s.in, 4);
  const Values gy = random_values(dt, s.batch * s.out, 5);
  std::vector<uint16_t> gx(x.raw.size()), gw(w.raw.size()), gb(static_cast<size_t>(s.out));
  linear_backward_lowp(ctx, dt, s, x.raw.data(), w.raw.data(), gy.raw.data(), gx.data(), gw.data(),
                       gb.data(), 0.25f);
  std::vector<double> rx(gx.size()), sx(gx.size()), rw(gw.size()), sw(gw.size());
  std::vector<double> rb(gb.size()), sb(gb.size());
  for (int64_t r = 0; r < s.batch; ++r) {
    for (int64_t o = 0; o < s.out; ++o) {
      const double g = gy.exact[r * s.out + o];
      rb[o] += 0.25 * g;
      sb[o] += 0.25 * std::fabs(g);
      for (int64_t i = 0; i < s.in; ++i) {
        rx[r * s.in + i] += g * w.exact[o * s.in + i];
        sx[r * s.in + i] += std::fabs(g * w.exact[o * s.in + i]);
        rw[o * s.in + i] += 0.25 * g * x.exact[r * s.in + i];
        sw[o * s.in + i] += 0.25 * std::fabs(g * x.exact[r * s.in + i]);
      }
    }
  }
  expect_close(dt, widen(dt, gx), rx, sx, s.out, "grad_input");
  expect_close(dt, widen(dt, gw), rw, sw, s.batch, "grad_weight");
  expect_close(dt, widen(dt, gb), rb, sb, s.batch, "grad_bias");
}

TEST_P(LowpGemmTest, BmmMatchesFloat64) {
  const DType dt = GetParam();
  HostContext ctx;
  const BmmShape s{3, 5, 6, 7, false, true};
  const Values a = random_values(dt, 3 * 5 * 7, 8), b = random_values(dt, 3 * 6 * 7, 9);
  std::vector<uint16_t> c(3 * 5 * 6);
  bmm_lowp(ctx, dt, s, a.raw.data(), b.raw.data(), c.data());
  std::vector<double> ref(c.size()), abs_sum(c.size());
  for (int64_t q = 0; q < 3; ++q) {
    for (int64_t i = 0; i < 5; ++i) {
      for (int64_t j = 0; j < 6; ++j) {
        for (int64_t p = 0; p < 7; ++p) {
          const double v = a.exact[q * 35 + i * 7 + p] * b.exact[q * 42 + j * 7 + p];
          ref[q * 30 + i * 6 + j] += v;
          abs_sum[q * 30 + i * 6 + j] += std::fabs(v);
        }
      }
    }
  }
  expect_close(dt, widen(dt, c), ref, abs_sum, 7, "bmm");
}

INSTANTIATE_TEST_SUITE_P(DTypes, LowpGemmTest, testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST_P(LowpGemmTest, ShallowAndShortProductsMatchFloat64Too) {
  // The shapes lowp_gemm emulates even on AMX (the Mlp head's gradients), in every transpose.
  const DType dt = GetParam();
  HostContext ctx;
  for (const auto& [m, n, k] : {std::array<int64_t, 3>{256, 512, 10}, {10, 512, 256}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Values a = random_values(dt, m * k, 31 + t), b = random_values(dt, k * n, 41 + t);
      LowpGemm g;
      g.in = g.out = dt;
      g.trans_a = ta;
      g.trans_b = tb;
      g.m = m;
      g.n = n;
      g.k = k;
      g.lda = ta ? m : k;
      g.ldb = tb ? k : n;
      g.ldc = n;
      EXPECT_FALSE(lowp_gemm_tiles_pay(g));
      std::vector<uint16_t> c(static_cast<size_t>(m * n));
      lowp_gemm(ctx, g, a.raw.data(), b.raw.data(), nullptr, c.data());
      std::vector<double> ref(c.size()), abs_sum(c.size());
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          double s = 0, sa = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double x = a.exact[ta ? p * m + i : i * k + p];
            const double y = b.exact[tb ? j * k + p : p * n + j];
            s += x * y;
            sa += std::fabs(x * y);
          }
          ref[i * n + j] = s;
          abs_sum[i * n + j] = sa;
        }
      }
      expect_close(dt, widen(dt, c), ref, abs_sum, k, "shallow or short");
    }
  }
}

TEST(LowpGemmTilesTest, OnlyProductsThatFillTheTiles) {
  LowpGemm g;
  g.m = g.n = g.k = 32;
  EXPECT_TRUE(lowp_gemm_tiles_pay(g));
  g.k = 31;
  EXPECT_FALSE(lowp_gemm_tiles_pay(g));
  g.k = 512;
  g.m = 31;
  EXPECT_FALSE(lowp_gemm_tiles_pay(g));
  g.m = 256;
  g.n = 10;  // a narrow output still fills the tiles' rows and depth
  EXPECT_TRUE(lowp_gemm_tiles_pay(g));
}

TEST(LowpGemmEngineTest, NamesWhatItRunsOn) {
  const std::string bf16 = lowp_gemm_engine(DType::kBFloat16);
  EXPECT_FALSE(bf16.empty());
  // Whatever the CPU, the name is one of the documented ones.
  EXPECT_TRUE(bf16 == "AMX" || bf16 == "emulated in float32") << bf16;
  EXPECT_EQ(lowp_gemm_engine(DType::kFloat16), "emulated in float32");  // oneDNN 2.6: no f16
}

}  // namespace
}  // namespace dpe::host
