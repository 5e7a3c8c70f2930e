// BFloat16 and Float16: the 16-bit floating-point element types, as stored (the bits) and
// converted to and from float32 with round-to-nearest-even, as PyTorch's c10::BFloat16 and
// c10::Half (and the hardware's VCVTNEPS2BF16 and VCVTPS2PH) do. A NaN stays a NaN (the quiet
// canonical one; its payload is not kept); an overflow rounds to infinity.
//
// Threading contract: pure values and functions; any thread.
#pragma once

#include <cstdint>
#include <cstring>

namespace dpe {

// The constructors are explicit so that a list of floats never converts to a list of these
// (Tensor::from_vector({1.0f, 2.0f}, ...) stays float32's).
struct BFloat16 {
  constexpr BFloat16() = default;
  constexpr explicit BFloat16(uint16_t b) : bits(b) {}
  uint16_t bits = 0;
};

struct Float16 {
  constexpr Float16() = default;
  constexpr explicit Float16(uint16_t b) : bits(b) {}
  uint16_t bits = 0;
};

namespace low_precision {

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

}  // namespace low_precision

inline BFloat16 to_bfloat16(float f) {
  const uint32_t u = low_precision::float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{0x7fc0};  // NaN
  // Round to nearest, ties to even: add 0x7fff plus the lowest kept bit.
  const uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return BFloat16{static_cast<uint16_t>(rounded >> 16)};
}

inline float to_float(BFloat16 b) { return low_precision::bits_float(uint32_t{b.bits} << 16); }

inline Float16 to_float16(float f) {
  const uint32_t u = low_precision::float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return Float16{static_cast<uint16_t>(sign | 0x7e00u)};   // NaN
  if (a >= 0x477ff000u) return Float16{static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (a < 0x38800000u) {
    // A half subnormal (or zero): a whole number of 2^-24 units. Adding 0.5, whose float32 ulp
    // is 2^-24, lets the FPU round to that unit (to nearest even); the bits above 0.5's then count
    // the units, and 1024 of them is the smallest normal's encoding.
    const float scaled = low_precision::bits_float(a) + 0.5f;
    return Float16{static_cast<uint16_t>(sign | (low_precision::float_bits(scaled) - 0x3f000000u))};
  }
  // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u;
  return Float16{static_cast<uint16_t>(sign | (rounded >> 13))};
}

inline float to_float(Float16 h) {
  const uint32_t sign = uint32_t{static_cast<uint16_t>(h.bits & 0x8000u)} << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu, mant = h.bits & 0x3ffu;
  if (exp == 0x1f) return low_precision::bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return low_precision::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  // Subnormal or zero: mant x 2^-24, exact in float32.
  const float magnitude = static_cast<float>(mant) * low_precision::bits_float(0x33800000u);
  return low_precision::bits_float(sign | low_precision::float_bits(magnitude));
}

// from_float<T>(x): float32 to the element type T (float, BFloat16 or Float16).
template <class T>
T from_float(float f);
template <>
inline float from_float<float>(float f) {
  return f;
}
template <>
inline BFloat16 from_float<BFloat16>(float f) {
  return to_bfloat16(f);
}
template <>
inline Float16 from_float<Float16>(float f) {
  return to_float16(f);
}
inline float to_float(float f) { return f; }

}  // namespace dpe
