#include "kernels/host/reduce.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/host/elementwise.h"
#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(ReduceTest, SumAllMatchesDoubleSum) {
  HostContext ctx;
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{13}, kParallelGrain * 3 + 5}) {
    const auto x = random_floats(n, 3);
    double want = 0.0;
    for (float v : x) want += v;
    float got = 0.0f;
    sum_all(ctx, x.data(), &got, n);
    EXPECT_NEAR(got, want, 1e-6 * (1.0 + std::fabs(want))) << n;
  }
}

// The squares' sum in one pass is sum_all over the float squares, bit for bit (clip_grad_norm_'s
// norm does not move when it takes the fused kernel), with one and with two threads.
TEST(ReduceTest, SumSquaresIsSumAllOfTheSquares) {
  HostContext ctx;
  const int threads = omp_get_max_threads();
  for (int t : {1, 2}) {
    omp_set_num_threads(t);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{13}, kParallelGrain * 3 + 5}) {
      const auto x = random_floats(n, 4, -3.0f, 3.0f);
      std::vector<float> sq(x.size());
      for (size_t i = 0; i < x.size(); ++i) sq[i] = x[i] * x[i];
      float want = 0.0f, got = 1.0f;
      sum_all(ctx, sq.data(), &want, n);
      sum_squares(ctx, x.data(), &got, n);
      EXPECT_EQ(got, want) << n << " elements, " << t << " threads";
    }
  }
  omp_set_num_threads(threads);
}

TEST(ReduceTest, ArgmaxRowsTakesTheFirstMaximumAndNan) {
  HostContext ctx;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float x[12] = {1,  3,   3,  0,   //
                       -5, -4,  -6, -4,  //
                       1,  nan, 9,  2};
  int64_t out[3];
  argmax_rows(ctx, x, out, 3, 4);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[1], 1);
  EXPECT_EQ(out[2], 1);
  const auto r = random_floats(37 * 11, 4);
  std::vector<int64_t> got(37);
  argmax_rows(ctx, r.data(), got.data(), 37, 11);
  for (int i = 0; i < 37; ++i) {
    int best = 0;
    for (int j = 1; j < 11; ++j) {
      if (r[i * 11 + j] > r[i * 11 + best]) best = j;
    }
    EXPECT_EQ(got[i], best) << "row " << i;
  }
}

TEST(ReduceTest, AllFiniteSpotsInfAndNan) {
  HostContext ctx;
  auto x = random_floats(kParallelGrain + 9, 5);
  EXPECT_TRUE(all_finite(ctx, x.data(), x.size()));
  x[kParallelGrain + 2] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(all_finite(ctx, x.data(), x.size()));
  x[kParallelGrain + 2] = -std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(all_finite(ctx, x.data(), x.size()));
  EXPECT_TRUE(all_finite(ctx, x.data(), 0));
}

TEST(ReduceTest, ChannelSumsMatchReference) {
  HostContext ctx;
  struct Case {
    int64_t n, c, s, threads;
  };
  const int threads_before = omp_get_max_threads();
  // Blocks of channels: 130 channels as 64, 64 and 2 (on two threads too: a block holds at most
  // 64); 5 channels on two threads as 3 and 2 (16 x 5 x 500 is above the grain that goes
  // parallel).
  for (Case k :
       {Case{1, 1, 1, 1}, Case{3, 5, 7, 1}, Case{8, 4, 1, 1}, Case{16, 16, 196, 1},
        Case{16, 16, 196, 2}, Case{3, 130, 9, 1}, Case{4, 130, 70, 2}, Case{16, 5, 500, 2}}) {
    SCOPED_TRACE(::testing::Message()
                 << k.n << " x " << k.c << " x " << k.s << ", " << k.threads << " threads");
    omp_set_num_threads(static_cast<int>(k.threads));
    const int64_t total = k.n * k.c * k.s;
    const auto x = random_floats(total, 6), gy = random_floats(total, 7);
    const auto mean = random_floats(k.c, 8);
    std::vector<float> s1(k.c), s2(k.c), g1(k.c), g2(k.c);
    channel_sums(ctx, x.data(), s1.data(), s2.data(), k.n, k.c, k.s);
    channel_grad_sums(ctx, x.data(), gy.data(), mean.data(), g1.data(), g2.data(), k.n, k.c, k.s);
    std::vector<double> w1(k.c), w2(k.c), w3(k.c), w4(k.c);
    for (int64_t i = 0; i < k.n; ++i) {
      for (int64_t ch = 0; ch < k.c; ++ch) {
        for (int64_t j = 0; j < k.s; ++j) {
          const int64_t at = (i * k.c + ch) * k.s + j;
          w1[ch] += x[at];
          w2[ch] += double(x[at]) * x[at];
          w3[ch] += gy[at];
          w4[ch] += double(gy[at]) * (double(x[at]) - mean[ch]);
        }
      }
    }
    expect_close(w1, s1, 1e-5, 1e-5, "sum");
    expect_close(w2, s2, 1e-5, 1e-5, "sumsq");
    expect_close(w3, g1, 1e-5, 1e-5, "sum_gy");
    expect_close(w4, g2, 1e-5, 1e-5, "sum_gy_xmu");
  }
  omp_set_num_threads(threads_before);
}

}  // namespace
}  // namespace dpe::host
