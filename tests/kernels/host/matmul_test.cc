#include "kernels/host/matmul.h"

#include <gtest/gtest.h>

#include "tests/kernels/host/kernel_test_util.h"

namespace dpe::host {
namespace {

using testing::expect_close;
using testing::random_floats;

struct Dims {
  int64_t m, k, n;
};

class MatmulTest : public ::testing::TestWithParam<Dims> {};

TEST_P(MatmulTest, MatchesReference) {
  const Dims d = GetParam();
  HostContext ctx;
  const auto a = random_floats(d.m * d.k, 1), b = random_floats(d.k * d.n, 2);
  std::vector<float> c(d.m * d.n, 123.0f);
  matmul(ctx, a.data(), b.data(), c.data(), d.m, d.k, d.n);
  std::vector<double> want(d.m * d.n);
  for (int64_t i = 0; i < d.m; ++i) {
    for (int64_t j = 0; j < d.n; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < d.k; ++p) acc += double(a[i * d.k + p]) * b[p * d.n + j];
      want[i * d.n + j] = acc;
    }
  }
  expect_close(want, c, 1e-5, 1e-5, "matmul");
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulTest,
                         ::testing::Values(Dims{1, 1, 1}, Dims{3, 5, 7}, Dims{17, 1, 9},
                                           Dims{64, 129, 33}, Dims{4, 0, 3}));

}  // namespace
}  // namespace dpe::host
