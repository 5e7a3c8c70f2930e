// DType and the 16-bit floats (engine/core/dtype.h, low_precision.h): sizes and names, and the
// conversions against independent references: a float64 nearest-even search for bfloat16, and
// the CPU's own F16C instructions for float16 (every half, and a million floats).
#include "engine/core/dtype.h"

#include <gtest/gtest.h>
#if defined(__F16C__)
#include <immintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace dpe {
namespace {

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

TEST(DTypeTest, SizesNamesAndPromotion) {
  EXPECT_EQ(dtype_size(DType::kFloat32), 4u);
  EXPECT_EQ(dtype_size(DType::kInt64), 8u);
  EXPECT_EQ(dtype_size(DType::kBFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::kFloat16), 2u);
  EXPECT_STREQ(dtype_name(DType::kBFloat16), "bfloat16");
  EXPECT_STREQ(dtype_name(DType::kFloat16), "float16");
  EXPECT_TRUE(is_floating_point(DType::kBFloat16));
  EXPECT_FALSE(is_floating_point(DType::kInt64));
  EXPECT_EQ(promote_types(DType::kBFloat16, DType::kBFloat16), DType::kBFloat16);
  EXPECT_EQ(promote_types(DType::kBFloat16, DType::kFloat32), DType::kFloat32);
  EXPECT_EQ(promote_types(DType::kBFloat16, DType::kFloat16), DType::kFloat32);
  const DTypeSet set{DType::kFloat32, DType::kBFloat16};
  EXPECT_TRUE(set.has(DType::kBFloat16));
  EXPECT_FALSE(set.has(DType::kFloat16));
  EXPECT_TRUE(DTypeSet{}.empty());
}

// The bfloat16 nearest to x by a search in float64: the two neighbours that bracket x, the
// nearer one, ties to the even encoding.
uint16_t nearest_bfloat16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint16_t down = static_cast<uint16_t>(u >> 16);
  const uint16_t up = static_cast<uint16_t>(down + 1);  // the next encoding away from zero
  const double d = std::fabs(static_cast<double>(x) - from_bits(uint32_t{down} << 16));
  // Past the largest finite bfloat16 the next encoding is infinity, which rounding treats as
  // 2^128 (IEEE 754's overflow rule).
  const double up_value =
      (up & 0x7f80) == 0x7f80 ? std::copysign(0x1p128, x) : from_bits(uint32_t{up} << 16);
  const double e = std::fabs(up_value - x);
  if (d < e) return down;
  if (e < d) return up;
  return (down & 1) == 0 ? down : up;
}

TEST(DTypeTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(to_bfloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(to_bfloat16(1.0f + 0x1p-8f).bits, 0x3f80);      // a tie: down to even
  EXPECT_EQ(to_bfloat16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);  // a tie: up to even
  EXPECT_EQ(to_bfloat16(-2.0f).bits, 0xc000);
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds to inf
  EXPECT_EQ(to_bfloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(to_bfloat16(std::nanf("")).bits, 0x7fc0);
  EXPECT_EQ(to_bfloat16(-std::nanf("")).bits, 0x7fc0);  // the canonical NaN, as PyTorch's
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t u = bits(gen) & 0xff7fffffu;  // finite exponents below the largest
    const float x = from_bits(u);
    ASSERT_EQ(to_bfloat16(x).bits, nearest_bfloat16(x)) << std::hexfloat << x;
  }
  for (uint32_t b = 0; b < 0x10000; ++b) {  // every bfloat16 widens exactly and narrows back
    const BFloat16 v{static_cast<uint16_t>(b)};
    if (std::isnan(to_float(v))) continue;
    ASSERT_EQ(to_bfloat16(to_float(v)).bits, b);
  }
}

TEST(DTypeTest, Float16RoundsToNearestEven) {
  EXPECT_EQ(to_float16(1.0f).bits, 0x3c00);
  EXPECT_EQ(to_float16(65504.0f).bits, 0x7bff);  // the largest half
  EXPECT_EQ(to_float16(65519.0f).bits, 0x7bff);
  EXPECT_EQ(to_float16(65520.0f).bits, 0x7c00);      // the tie above it rounds to inf
  EXPECT_EQ(to_float16(0x1p-24f).bits, 0x0001);      // the smallest subnormal
  EXPECT_EQ(to_float16(0x1p-25f).bits, 0x0000);      // a tie: down to even zero
  EXPECT_EQ(to_float16(3 * 0x1p-25f).bits, 0x0002);  // a tie: up to even
  EXPECT_EQ(to_float16(0x1p-14f).bits, 0x0400);      // the smallest normal
  EXPECT_EQ(to_float16(-0.0f).bits, 0x8000);
  EXPECT_EQ(to_float16(std::nanf("")).bits, 0x7e00);
  EXPECT_EQ(to_float(Float16{0x3555}), 0.333251953125f);
  EXPECT_EQ(to_float(Float16{0x0001}), 0x1p-24f);
  EXPECT_TRUE(std::isinf(to_float(Float16{0xfc00})));
}

#if defined(__F16C__)
// The CPU's conversion instructions (VCVTPS2PH with round-to-nearest-even, VCVTPH2PS) as the
// reference: every half widens as they do, and a million floats narrow as they do.
TEST(DTypeTest, Float16MatchesTheHardware) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const Float16 h{static_cast<uint16_t>(b)};
    const float hw = _cvtsh_ss(static_cast<uint16_t>(b));
    if (std::isnan(hw)) {
      ASSERT_TRUE(std::isnan(to_float(h))) << b;
      continue;
    }
    ASSERT_EQ(to_float(h), hw) << b;
  }
  std::mt19937 gen(11);
  std::uniform_int_distribution<uint32_t> bits;
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f);
  for (int i = 0; i < 1000000; ++i) {
    // Half the draws anywhere in float32, half in and around the half range.
    float x = i % 2 == 0 ? from_bits(bits(gen)) : small(gen) * std::ldexp(1.0f, -(i % 40));
    if (std::isnan(x)) continue;
    const uint16_t hw = _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT);
    ASSERT_EQ(to_float16(x).bits, hw) << std::hexfloat << x;
  }
}
#endif

}  // namespace
}  // namespace dpe
