#include "kernels/host/softmax.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

// Softmax in double over the entries k <= q + (tk - tq) (all when not causal), 0 elsewhere.
std::vector<double> reference(const SoftmaxShape& s, const std::vector<float>& x) {
  std::vector<double> y(x.size(), 0.0);
  for (int64_t r = 0; r < s.batch * s.tq; ++r) {
    const int64_t q = r % s.tq;
    const int64_t valid =
        s.causal ? std::max<int64_t>(0, std::min(s.tk, q + 1 + s.tk - s.tq)) : s.tk;
    double mx = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, double(x[r * s.tk + j]));
    for (int64_t j = 0; j < valid; ++j) sum += std::exp(x[r * s.tk + j] - mx);
    for (int64_t j = 0; j < valid; ++j) y[r * s.tk + j] = std::exp(x[r * s.tk + j] - mx) / sum;
  }
  return y;
}

TEST(SoftmaxTest, ForwardWithAndWithoutCausalMaskAndBackwardMatchReference) {
  HostContext ctx;
  // Square (GPT training), more keys than queries (a cache), more queries than keys (empty rows),
  // and one large enough for the OpenMP loop.
  for (SoftmaxShape base :
       {SoftmaxShape{1, 1, 1, false}, SoftmaxShape{3, 5, 5, false}, SoftmaxShape{2, 3, 7, false},
        SoftmaxShape{2, 6, 4, false}, SoftmaxShape{48, 128, 128, false}}) {
    for (bool causal : {false, true}) {
      SoftmaxShape s = base;
      s.causal = causal;
      const int64_t n = s.batch * s.tq * s.tk;
      auto x = random_floats(n, 1, -20.0f, 20.0f);
      x[0] = 90.0f;  // exp(90) overflows float without the max shift
      const auto want = reference(s, x);
      std::vector<float> y(n, 7.0f);
      softmax_forward(ctx, s, x.data(), y.data());
      const std::string what = std::string("softmax causal=") + (causal ? "1" : "0") +
                               " tq=" + std::to_string(s.tq) + " tk=" + std::to_string(s.tk);
      expect_close(want, y, 1e-5, 1e-7, what);
      for (int64_t i = 0; i < n; ++i) {
        if (want[i] == 0.0 && causal) {
          ASSERT_EQ(y[i], 0.0f) << what << " masked entry " << i;
        }
      }

      const auto gy = random_floats(n, 2);
      std::vector<double> gx(n);
      for (int64_t r = 0; r < s.batch * s.tq; ++r) {
        double dot = 0.0;
        for (int64_t j = 0; j < s.tk; ++j) dot += gy[r * s.tk + j] * want[r * s.tk + j];
        for (int64_t j = 0; j < s.tk; ++j) {
          gx[r * s.tk + j] = want[r * s.tk + j] * (gy[r * s.tk + j] - dot);
        }
      }
      std::vector<float> got_gx(n);
      softmax_backward(ctx, y.data(), gy.data(), got_gx.data(), s.batch * s.tq, s.tk);
      expect_close(gx, got_gx, 1e-4, 1e-6, what + " gx");
    }
  }
}

// torch.softmax's NaN rule: a NaN among a row's entries makes the row NaN, the other rows are
// untouched; under the causal mask a NaN past the diagonal takes no part, and masked entries
// stay exactly 0.
TEST(SoftmaxTest, ANaNMakesItsRowNaN) {
  HostContext ctx;
  const float nan = std::nanf("");
  for (bool causal : {false, true}) {
    const SoftmaxShape s{1, 3, 3, causal};
    const std::vector<float> x = {1,   2, nan,  // the NaN is past the diagonal of row 0
                                  nan, 0, 1,    //
                                  3,   1, 2};
    std::vector<float> y(9);
    softmax_forward(ctx, s, x.data(), y.data());
    // Row 1's entries that take part are NaN; under the mask its last one stays exactly 0.
    for (int j = 0; j < (causal ? 2 : 3); ++j) EXPECT_TRUE(std::isnan(y[3 + j])) << causal << j;
    if (causal) {
      EXPECT_EQ(y[5], 0.0f);
    }
    EXPECT_EQ(std::isnan(y[0]), !causal);
    EXPECT_FALSE(std::isnan(y[6]));
    if (causal) {
      EXPECT_EQ(y[0], 1.0f);  // row 0 keeps only its first entry
    }
  }
}

}  // namespace
}  // namespace dpe::host
