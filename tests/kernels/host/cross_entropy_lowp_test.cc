// cross_entropy of 16-bit logits (kernels/host/cross_entropy_lowp.h) against log_softmax.h's
// float32 kernels on the widened logits: the same loss and lse bit for bit, and their gradient
// rounded once, also with ignored targets and a row holding an infinity.
#include "kernels/host/cross_entropy_lowp.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/host/convert.h"
#include "kernels/host/log_softmax.h"
#include "tests/kernels/host/lowp_test_util.h"

namespace dpe::host {
namespace {

class CrossEntropyLowpTest : public testing::TestWithParam<DType> {};

TEST_P(CrossEntropyLowpTest, IsTheFloat32KernelOnWidenedLogits) {
  const DType dt = GetParam();
  HostContext ctx;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{5, 7}, {64, 2048}}) {
    lowp_testing::Values x = lowp_testing::random_values(dt, rows * cols, 3, 2.0f);
    // Row 1 holds +inf: its loss term and gradient are NaN, as torch's.
    const float inf = std::numeric_limits<float>::infinity();
    convert(&x.raw[cols + 2], dt, &inf, DType::kFloat32, 1);
    std::vector<int64_t> target(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) target[r] = (r * 5) % cols;
    target[0] = -100;  // ignored
    std::vector<float> wide(x.raw.size());
    convert(wide.data(), DType::kFloat32, x.raw.data(), dt, rows * cols);
    float out32, out16;
    std::vector<float> lse32(rows), lse16(rows);
    cross_entropy_forward(ctx, wide.data(), target.data(), &out32, lse32.data(), rows, cols, -100);
    cross_entropy_forward_lowp(ctx, dt, x.raw.data(), target.data(), &out16, lse16.data(), rows,
                               cols, -100);
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols);
    EXPECT_TRUE(out32 == out16 || (std::isnan(out32) && std::isnan(out16))) << what;
    for (int64_t r = 0; r < rows; ++r) {
      EXPECT_TRUE(lse32[r] == lse16[r] || (std::isnan(lse32[r]) && std::isnan(lse16[r])))
          << what << " row " << r;
    }
    const float gout = 1.5f;
    std::vector<float> g32(wide.size());
    cross_entropy_backward(ctx, wide.data(), target.data(), lse32.data(), &gout, g32.data(), rows,
                           cols, -100);
    std::vector<uint16_t> want(x.raw.size()), got(x.raw.size());
    convert(want.data(), dt, g32.data(), DType::kFloat32, rows * cols);
    cross_entropy_backward_lowp(ctx, dt, x.raw.data(), target.data(), lse16.data(), &gout,
                                got.data(), rows, cols, -100);
    EXPECT_EQ(got, want) << what;
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CrossEntropyLowpTest,
                         testing::Values(DType::kBFloat16, DType::kFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace dpe::host
