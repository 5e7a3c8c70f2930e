#include "kernels/host/bmm.h"

#include <gtest/gtest.h>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

TEST(BmmTest, EveryTransposeCombinationMatchesReference) {
  HostContext ctx;
  for (BmmShape base : {BmmShape{1, 1, 1, 1, false, false}, BmmShape{3, 5, 4, 7, false, false},
                        BmmShape{12, 64, 64, 32, false, false}, BmmShape{2, 3, 6, 0, false, false}}) {
    for (int flags = 0; flags < 4; ++flags) {
      BmmShape s = base;
      s.trans_a = flags & 1;
      s.trans_b = flags & 2;
      const auto a = random_floats(s.batch * s.m * s.k, 1);
      const auto b = random_floats(s.batch * s.k * s.n, 2);
      std::vector<double> want(s.batch * s.m * s.n, 0.0);
      for (int64_t i = 0; i < s.batch; ++i) {
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t c = 0; c < s.n; ++c) {
            double acc = 0.0;
            for (int64_t t = 0; t < s.k; ++t) {
              // a held [m, k] or [k, m]; b held [k, n] or [n, k].
              const double av = a[i * s.m * s.k + (s.trans_a ? t * s.m + r : r * s.k + t)];
              const double bv = b[i * s.k * s.n + (s.trans_b ? c * s.k + t : t * s.n + c)];
              acc += av * bv;
            }
            want[(i * s.m + r) * s.n + c] = acc;
          }
        }
      }
      std::vector<float> got(want.size(), 123.0f);
      bmm(ctx, s, a.data(), b.data(), got.data());
      expect_close(want, got, 1e-5, 1e-5,
                   "bmm trans_a=" + std::to_string(s.trans_a) + " trans_b=" +
                       std::to_string(s.trans_b) + " k=" + std::to_string(s.k));
    }
  }
}

}  // namespace
}  // namespace dpe::host
