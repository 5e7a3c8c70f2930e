// host::convert (kernels/host/convert.h): each dtype pair against the element conversions of
// engine/core/low_precision.h (themselves checked against float64 and F16C in dtype_test), on
// lengths that take the serial and the parallel path.
#include "kernels/host/convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace dpe::host {
namespace {

std::vector<float> values(int64_t n) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal(0.0f, 100.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = normal(gen);
  if (n > 3) {
    v[0] = std::nanf("");
    v[1] = 1e30f;
    v[2] = -0.0f;
  }
  return v;
}

class ConvertTest : public testing::TestWithParam<int64_t> {};

TEST_P(ConvertTest, FloatToSixteenBitsAndBack) {
  const int64_t n = GetParam();
  const std::vector<float> x = values(n);
  std::vector<BFloat16> b(x.size());
  std::vector<Float16> h(x.size());
  convert(b.data(), DType::kBFloat16, x.data(), DType::kFloat32, n);
  convert(h.data(), DType::kFloat16, x.data(), DType::kFloat32, n);
  std::vector<float> back_b(x.size()), back_h(x.size());
  convert(back_b.data(), DType::kFloat32, b.data(), DType::kBFloat16, n);
  convert(back_h.data(), DType::kFloat32, h.data(), DType::kFloat16, n);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(b[i].bits, to_bfloat16(x[i]).bits) << i;
    ASSERT_EQ(h[i].bits, to_float16(x[i]).bits) << i;
    if (std::isnan(x[i])) continue;
    ASSERT_EQ(back_b[i], to_float(b[i])) << i;
    ASSERT_EQ(back_h[i], to_float(h[i])) << i;
  }
  // bfloat16 to float16 goes through float32, rounding once more.
  std::vector<Float16> bh(x.size());
  convert(bh.data(), DType::kFloat16, b.data(), DType::kBFloat16, n);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(bh[i].bits, to_float16(to_float(b[i])).bits);
}

INSTANTIATE_TEST_SUITE_P(Lengths, ConvertTest, testing::Values(int64_t{5}, int64_t{1} << 17));

TEST(ConvertIntegersTest, Int64AndFloat) {
  const std::vector<int64_t> i = {0, -3, 7, (int64_t{1} << 40) + 1};
  std::vector<float> f(i.size());
  convert(f.data(), DType::kFloat32, i.data(), DType::kInt64, 4);
  EXPECT_EQ(f, (std::vector<float>{0.0f, -3.0f, 7.0f, 0x1p40f}));
  std::vector<int64_t> same(i.size());
  convert(same.data(), DType::kInt64, i.data(), DType::kInt64, 4);
  EXPECT_EQ(same, i);  // int64 to int64 keeps every bit
  const std::vector<float> g = {2.7f, -2.7f};
  std::vector<int64_t> t(2);
  convert(t.data(), DType::kInt64, g.data(), DType::kFloat32, 2);
  EXPECT_EQ(t, (std::vector<int64_t>{2, -2}));
}

}  // namespace
}  // namespace dpe::host
