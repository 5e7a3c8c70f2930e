// 16-bit test data for the host's bfloat16/float16 kernels: random values rounded to the dtype,
// with their exact float64 values for a reference computed from the same inputs.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/dtype.h"
#include "kernels/host/convert.h"

namespace dpe::host::lowp_testing {

// n values of dtype dt (as raw 16-bit words) and their exact float64 values.
struct Values {
  std::vector<uint16_t> raw;
  std::vector<double> exact;
};

inline Values random_values(DType dt, int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> f(static_cast<size_t>(n));
  for (float& v : f) v = normal(gen);
  Values out;
  out.raw.resize(f.size());
  convert(out.raw.data(), dt, f.data(), DType::kFloat32, n);
  std::vector<float> back(f.size());
  convert(back.data(), DType::kFloat32, out.raw.data(), dt, n);
  out.exact.assign(back.begin(), back.end());
  return out;
}

inline std::vector<double> widen(DType dt, const std::vector<uint16_t>& raw) {
  std::vector<float> f(raw.size());
  convert(f.data(), DType::kFloat32, raw.data(), dt, static_cast<int64_t>(raw.size()));
  return std::vector<double>(f.begin(), f.end());
}

// The output's rounding, doubled: 2^-8 relative for bfloat16 (8 significant bits), 2^-11 for
// float16.
inline double unit(DType dt) { return dt == DType::kBFloat16 ? 0x1p-8 : 0x1p-11; }

// The bound on a float32-accumulated sum of `terms` products rounded once to dt: the rounding,
// plus terms * 2^-23 of the sum of the products' magnitudes, doubled.
inline double bound(DType dt, double ref, double abs_sum, int64_t terms) {
  return unit(dt) * (ref < 0 ? -ref : ref) + 2.0 * static_cast<double>(terms) * 0x1p-23 * abs_sum +
         1e-30;
}

}  // namespace dpe::host::lowp_testing
